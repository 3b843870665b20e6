"""What a running tool can ask of the boundary: ``heartbeat()`` and ``current_call()``.

Module functions backed by a context variable set around each tool run (as Temporal's
``activity.heartbeat``/``activity.info``), so an executor keeps its plain signature and code
deep in its call stack can report progress. Outside a tool both are harmless: ``heartbeat``
does nothing, ``current_call`` answers ``None``.

A heartbeat is coalesced: it writes to the store at most once per ``interval_s`` (the latest
progress and message win), so a tool may call it in a tight loop. It never raises into the
tool, except ``CallCancelled`` once the call is no longer the tool's to finish: its record
was sealed (cancelled, reaped, ended by its deadline), another attempt took it over, or the
tool's own time ran out. The boundary catches that exception and frees the tool's thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from boundary import telemetry
from boundary.errors import StoreError

if TYPE_CHECKING:
    from boundary.models import CanonicalKey
    from boundary.store.base import CanonicalStore

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "MAX_PROGRESS_MESSAGE_BYTES",
    "CallCancelled",
    "CallInfo",
    "CallScope",
    "ProgressReport",
    "current_call",
    "heartbeat",
    "progress_message",
    "set_progress_listener",
]

logger = logging.getLogger(__name__)

#: At most one store write per call per this many seconds (``TOOL_BOUNDARY_HEARTBEAT_INTERVAL_S``).
DEFAULT_HEARTBEAT_INTERVAL_S = 1.0
#: Longest progress message kept, UTF-8 bytes (longer ones are cut at a character boundary).
MAX_PROGRESS_MESSAGE_BYTES = 200


class CallCancelled(Exception):
    """Raised by ``heartbeat()`` once the running call is no longer the tool's to finish.

    Let it propagate (clean up on the way out, e.g. cancel a running query): the call's
    record already says how it ended, and nothing the tool returns can change that.
    """


class Ended(StrEnum):
    """Why a heartbeat told the tool to stop."""

    #: The record is sealed (cancelled, reaped, expired): it decides.
    SEALED = "SEALED"
    #: Another attempt of the call took its record over.
    SUPERSEDED = "SUPERSEDED"
    #: The tool's time limit (or its run's deadline) passed.
    TIME_UP = "TIME_UP"


@dataclass(frozen=True, slots=True)
class CallInfo:
    """The call a tool is running for (``current_call()``)."""

    run_id: str
    tool_call_id: str
    tool_name: str
    #: 1 for the first send of the call; a retry (or a re-send of a lost message) counts up.
    attempt: int
    #: The run's deadline, if it has one.
    deadline: datetime | None
    #: Seconds left before the tool's time limit (or the run's deadline) ends it.
    time_left_s: float
    #: When this attempt started, on the store's clock (for a rate-limited tool: the start
    #: its tool's rate window counts).
    started_at: datetime | None = None


def progress_message(message: object) -> str | None:
    """A message as stored: a string only, control characters dropped, at most
    ``MAX_PROGRESS_MESSAGE_BYTES`` UTF-8 bytes (cut at a character boundary); ``None`` for
    anything else or nothing left."""
    if not isinstance(message, str):
        return None
    if message.isascii() and message.isprintable() and len(message) <= MAX_PROGRESS_MESSAGE_BYTES:
        return message or None  # the common case, without a look at each character
    kept = "".join(ch for ch in message if unicodedata.category(ch)[0] != "C")
    encoded = kept.encode("utf-8", errors="ignore")[:MAX_PROGRESS_MESSAGE_BYTES]
    text = encoded.decode("utf-8", errors="ignore")
    return text or None


def progress_fraction(progress: object) -> float | None:
    """A fraction as stored: a real number clamped to 0..1; ``None`` for NaN or a non-number."""
    if isinstance(progress, bool) or not isinstance(progress, int | float):
        return None
    value = float(progress)
    if math.isnan(value):
        return None
    return min(max(value, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """A heartbeat the store kept, as a progress listener gets it (``set_progress_listener``)."""

    key: CanonicalKey
    tool_name: str
    attempt: int
    fraction: float | None
    message: str | None


#: Called after each heartbeat the store kept, on the tool's thread.
ProgressListener = Callable[[ProgressReport], None]

_listener: ProgressListener | None = None


def set_progress_listener(listener: ProgressListener | None) -> ProgressListener | None:
    """Installs the one function told of every stored heartbeat; returns the one before.

    For the layers above the core that show progress elsewhere (the Celery tasks send it to
    Flower as task events): the core knows no Celery. The listener runs on the tool's thread
    right after the store write, so it must be quick; whatever it raises is logged (its type
    only) and never reaches the tool.
    """
    global _listener
    previous, _listener = _listener, listener
    return previous


def _tell_listener(report: ProgressReport) -> None:
    listener = _listener
    if listener is None:
        return
    try:
        listener(report)
    except Exception as exc:
        name = type(exc).__name__
        logger.warning("progress listener failed for %s: %s", report.key.identity, name)


def note_stale_holder(
    store: CanonicalStore, key: CanonicalKey, tool: str, attempt: int, step: str
) -> None:
    """Counts and logs a stale holder: attempt ``attempt`` of the call went on after another
    attempt took it over, and its ``step`` was refused (ids and codes only). A limited tool's
    flow control counts it too (``limits`` shows it)."""
    telemetry.stale_holder(tool)
    flow = getattr(store, "flow", None)  # (a store without flow control has none)
    if flow is not None:
        flow.stale_holder(tool)
    logger.warning(
        "call %s: attempt %d is stale (another attempt has the call): its %s was refused",
        key.identity,
        attempt,
        step,
    )


class CallScope:
    """One running attempt of a call, as its tool's heartbeats see it.

    Made by the execute step; the tool's thread runs inside ``active()``.
    """

    def __init__(
        self,
        store: CanonicalStore,
        key: CanonicalKey,
        *,
        tool_name: str,
        attempt: int,
        time_limit_s: float,
        deadline: datetime | None = None,
        heartbeat_timeout_s: float | None = None,
        interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        started_at: datetime | None = None,
    ) -> None:
        self.store = store
        self.started_at = started_at
        self.key = key
        self.tool_name = tool_name
        self.attempt = attempt
        self.deadline = deadline
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.interval_s = interval_s
        self._clock = clock
        self._ends_at = clock() + max(time_limit_s, 0.0)
        self._lock = threading.Lock()
        self._last_write: float | None = None
        self._fraction: float | None = None
        self._message: str | None = None
        #: Set once the tool must stop; the reason.
        self.ended: Ended | None = None
        #: Store writes made (for the benchmark and tests).
        self.writes = 0
        #: Set once this attempt learned that another attempt has its call (a stale holder).
        self.stale = False

    @property
    def time_left_s(self) -> float:
        return max(self._ends_at - self._clock(), 0.0)

    def info(self) -> CallInfo:
        return CallInfo(
            run_id=self.key.run_id,
            tool_call_id=self.key.tool_call_id,
            tool_name=self.tool_name,
            attempt=self.attempt,
            deadline=self.deadline,
            time_left_s=self.time_left_s,
            started_at=self.started_at,
        )

    def end(self, why: Ended) -> None:
        """The tool must stop at its next heartbeat (the execute step gave up on it)."""
        with self._lock:
            if self.ended is None:
                self.ended = why

    def superseded(self, step: str) -> None:
        """A step of this attempt (``step``: heartbeat, raw, seal, retry) was refused because
        another attempt has the call now: this one is a stale holder and must stop. Counted
        (``tool_boundary_stale_holders_total``) and logged once per attempt."""
        with self._lock:
            if self.ended is None:
                self.ended = Ended.SUPERSEDED
            first, self.stale = not self.stale, True
        if first:
            note_stale_holder(self.store, self.key, self.tool_name, self.attempt, step)

    def beat(self, progress: object = None, message: object = None) -> None:
        """``heartbeat()`` of this call: keeps the values, writes them when due."""
        fraction = progress_fraction(progress)
        text = progress_message(message)
        with self._lock:
            if self.ended is None and self._clock() >= self._ends_at:
                self.ended = Ended.TIME_UP
            if self.ended is not None:
                raise CallCancelled()
            if fraction is not None:
                self._fraction = fraction
            if text is not None:
                self._message = text
            now = self._clock()
            if self._last_write is not None and now - self._last_write < self.interval_s:
                return  # coalesced: the latest values go with the next write
            self._last_write = now
            fraction, text = self._fraction, self._message
        self._write(fraction, text)

    def _write(self, fraction: float | None, text: str | None) -> None:
        from boundary.store.base import WriteStatus

        try:
            written = self.store.heartbeat(
                self.key,
                attempt=self.attempt,
                progress=fraction,
                message=text,
                heartbeat_timeout_s=self.heartbeat_timeout_s,
            )
        except StoreError:
            # A store hiccup must not fail a tool that is doing its work: the next beat
            # tries again (and the reaper judges a call by its last stored sign of life).
            logger.warning("heartbeat of %s not stored (store error)", self.key.identity)
            return
        self.writes += 1
        if written is WriteStatus.OK:
            _tell_listener(ProgressReport(self.key, self.tool_name, self.attempt, fraction, text))
            return
        if written is WriteStatus.SUPERSEDED:
            self.superseded("heartbeat")
        else:
            self.end(Ended.SEALED)
        raise CallCancelled()

    @contextmanager
    def active(self) -> Iterator[CallScope]:
        """Makes this the current call of the running thread (or task) for the block."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def runner(self, executor: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``executor`` wrapped to run as this call (on whatever thread runs it)."""

        def run(arguments: Any) -> Any:
            with self.active():
                return executor(arguments)

        return run


_current: ContextVar[CallScope | None] = ContextVar("tool_boundary_call", default=None)


def heartbeat(progress: float | None = None, message: str | None = None) -> None:
    """Reports that the running tool is alive, and how far it got.

    Args:
        progress: a fraction of the work done, 0..1 (clamped; NaN and non-numbers ignored).
        message: a short status line, at most 200 UTF-8 bytes (control characters dropped).
            It is shown to people AND to the agent (``ToolOutcome.progress``, MCP status
            messages): never put a secret or raw data in it.

    At most one store write per call per heartbeat interval (the latest values win). Does
    nothing outside a tool. Never raises into the tool, except ``CallCancelled`` once the
    call is no longer the tool's to finish.
    """
    scope = _current.get()
    if scope is not None:
        scope.beat(progress, message)


def current_call() -> CallInfo | None:
    """The call the running tool serves, or ``None`` outside a tool."""
    scope = _current.get()
    return None if scope is None else scope.info()
