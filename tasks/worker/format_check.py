"""A worker's side of format versions (``boundary.formats``): its start against the store's
marker, and a call whose message or record is of a newer format than it reads.

A call of a newer format fails with ``FORMAT_TOO_NEW``: one log line names both versions, the
call is sealed ERROR with the code (fenced to its attempt, so a newer worker's attempt is
never touched) and the task fails with the code only (Flower's "Failed"). Nothing is guessed.
"""

from __future__ import annotations

import logging
from typing import Any

from boundary import CanonicalKey, ErrorCode, formats
from boundary.call_steps import key_of
from tasks.exits import EXIT_USAGE
from tasks.runtime import get_runtime

logger = logging.getLogger(__name__)


def seal_too_new(key: CanonicalKey, attempt: int | None) -> str:
    """Seals the call ERROR ``FORMAT_TOO_NEW`` (fenced to ``attempt`` when given); the code
    the task fails with. A store that cannot say leaves the call to the reaper."""
    try:
        get_runtime().store.seal_error(key, ErrorCode.FORMAT_TOO_NEW, attempt=attempt)
    except Exception as exc:
        logger.error("call %s not sealed FORMAT_TOO_NEW: %s", key.identity, type(exc).__name__)
    return ErrorCode.FORMAT_TOO_NEW.value


def refused_message(
    request: Any, run_id: str, tool_call_id: str, attempt: int | None
) -> str | None:
    """The code a task fails with when its message is of a newer format (the call sealed
    ``FORMAT_TOO_NEW``), ``None`` when this worker reads it."""
    found = formats.parse(formats.message_format(request))
    if found <= formats.CURRENT:
        return None
    formats.refused("task message", found)
    key = key_of(run_id, tool_call_id)
    if key is None:
        return ErrorCode.FORMAT_TOO_NEW.value
    return seal_too_new(key, attempt)


def check_store_format(**_: Any) -> None:
    """``worker_init``: exit 2, with one line, when the store holds a format this worker
    cannot read (a newer incompatible version wrote it: upgrade this worker); else the
    worker's format goes into the store's marker. A store that cannot say is left to the
    start-up's own checks (they run first)."""
    try:
        problem = formats.check_store(get_runtime().store.client)
    except Exception as exc:
        logger.warning("tool-boundary worker: store format not checked (%s)", type(exc).__name__)
        return
    if problem is not None:
        logger.critical("tool-boundary worker cannot start: %s", problem)
        raise SystemExit(EXIT_USAGE)
