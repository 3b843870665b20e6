"""Format versions of what two versions of tool-boundary share in a fleet.

Three things carry one: the record (its hash field ``format``), the task messages (their
header ``tool_boundary_format``) and the seal's Pub/Sub message (a last line ``format=N``).
Something written without one is format 1: the release 0.5.0 wrote none. This code writes
``CURRENT`` and reads ``CURRENT`` and ``PREVIOUS``; a newer format it does not know fails that
one call with ``FORMAT_TOO_NEW`` and one log line naming both versions (never a guess, never a
traceback). The store also keeps a marker (``FORMATS_KEY``): the newest format written into it
and the oldest format that can still read it; a worker whose format is older than that says
so at start and exits 2 (``check_store``). ``docs/how-to/upgrade-a-fleet.md`` is the promise
operators read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from boundary.errors import ErrorCode, StoreError
from boundary.store.keys import PREFIX

logger = logging.getLogger(__name__)

#: The format this code writes (0.6.0). 0.5.0 wrote format 1 (no field, no header, no line).
CURRENT = 2
#: The oldest format this code still reads (and so the oldest version it can share a fleet with).
PREVIOUS = 1
#: The record's hash field.
RECORD_FIELD = "format"
#: The task messages' header (execute and project steps).
HEADER = "tool_boundary_format"
#: The seal message's last line starts with this.
SEAL_LINE = "format="
#: The store's marker (a hash): ``written`` the newest format a worker of the fleet writes,
#: ``readers_from`` the oldest format that can still read what it writes.
FORMATS_KEY = f"{PREFIX}:formats"


class FormatTooNew(StoreError):
    """Something of a newer format than this code knows: that call fails with
    ``FORMAT_TOO_NEW``.

    Attributes:
        what: "record", "task message" or "seal message".
        found: the format it carries.
    """

    code = ErrorCode.FORMAT_TOO_NEW

    def __init__(self, what: str, found: int) -> None:
        super().__init__(ErrorCode.FORMAT_TOO_NEW)
        self.what = what
        self.found = found


def parse(value: object) -> int:
    """The format a field, header or line holds: 1 when absent or empty (0.5.0 wrote none).
    A value that is not a positive whole number is treated as newer than any known."""
    if value is None or value == "":
        return 1
    try:
        found = int(str(value))
    except ValueError:
        return CURRENT + 1
    return found if found >= 1 else CURRENT + 1


def check(what: str, value: object) -> int:
    """The format of ``value`` (``parse``) when this code reads it; else logs one line naming
    both versions and raises ``FormatTooNew``."""
    found = parse(value)
    if found > CURRENT:
        refused(what, found)
        raise FormatTooNew(what, found)
    return found


def refused(what: str, found: int) -> None:
    """The one log line of a refusal: what, its format and the formats this version reads."""
    logger.error(
        "%s of format %d refused (FORMAT_TOO_NEW): this version reads formats %d to %d",
        what,
        found,
        PREVIOUS,
        CURRENT,
    )


def check_record(fields: Mapping[str, str]) -> None:
    """Raises ``FormatTooNew`` for a record's fields of a newer format."""
    check("record", fields.get(RECORD_FIELD))


def record_too_new(fields: Mapping[str, str]) -> bool:
    """True for a record's fields of a newer format (no log line: a batch read skips it)."""
    return parse(fields.get(RECORD_FIELD)) > CURRENT


def message_format(request: Any) -> object:
    """The format header of a Celery task's request (``None`` when absent: format 1). Celery
    puts a message's own headers on the request; ``headers`` holds them on some paths."""
    found = getattr(request, HEADER, None)
    if found is None:
        headers = getattr(request, "headers", None)
        if isinstance(headers, Mapping):
            found = headers.get(HEADER)
    return found


def check_message(request: Any) -> None:
    """Raises ``FormatTooNew`` for a task message of a newer format."""
    check("task message", message_format(request))


def split_seal(data: str) -> tuple[str, int]:
    """A seal message without its format line, and its format (1 without one). The agent
    result before it is canonical JSON (no raw newline), so the line is never a result's."""
    head, sep, tail = data.rpartition("\n")
    if sep and tail.startswith(SEAL_LINE):
        return head, parse(tail[len(SEAL_LINE) :])
    return data, 1


def check_store(client: Any) -> str | None:
    """At a worker's start: the problem (one line) when the store's marker says it holds a
    format this code cannot read; else records this code's format in the marker (the newest
    one wins) and returns ``None``. Raises the driver's error when the store cannot say."""
    written, readers_from = client.hmget(FORMATS_KEY, ["written", "readers_from"])
    if readers_from is not None and parse(readers_from) > CURRENT:
        return (
            f"the store holds format {parse(written)}, which needs a reader of format "
            f"{parse(readers_from)} or newer; this worker reads formats {PREVIOUS} to "
            f"{CURRENT}: upgrade this worker"
        )
    if written is None or parse(written) < CURRENT:
        client.hset(FORMATS_KEY, mapping={"written": CURRENT, "readers_from": PREVIOUS})
    return None


def failure_code(exc: BaseException) -> ErrorCode:
    """The code a call's read that failed with ``exc`` (a ``StoreError``) ends with:
    ``FORMAT_TOO_NEW`` for a newer format, else ``STORE_UNAVAILABLE``."""
    return (
        ErrorCode.FORMAT_TOO_NEW if isinstance(exc, FormatTooNew) else ErrorCode.STORE_UNAVAILABLE
    )
