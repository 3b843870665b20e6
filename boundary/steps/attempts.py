"""An execute step's attempts: how one ends (``ExecuteResult``), the attempt that holds a
call (``Holder``: its fencing token), and the call's next attempt (``next_attempt``: the one
way a call moves on to a new attempt and is sent, for the worker that hands a call on and for
the reaper that finds it lost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from boundary import formats, telemetry
from boundary.call_context import DEFAULT_HEARTBEAT_INTERVAL_S, CallScope, note_stale_holder
from boundary.diagnostics import Diagnostic, Stage
from boundary.errors import ErrorCode
from boundary.flow import Flow
from boundary.models import CanonicalKey, ToolOutcome
from boundary.registry import DEFAULT_QUEUE, ToolSpec
from boundary.store.base import CanonicalStore, WriteStatus

__all__ = [
    "AttemptSender",
    "AttemptTerms",
    "ExecuteResult",
    "Holder",
    "next_attempt",
    "refuse_newer_message",
    "seal_too_new",
    "send_attempt",
]

logger = logging.getLogger(__name__)

EXECUTE, PROJECT = Stage.EXECUTE, Stage.PROJECT
#: The note of a call whose tool the worker's registry does not have.
NOT_REGISTERED = "the tool is not in this worker's registry (TOOL_BOUNDARY_TOOLS)"


class ExecuteResult(StrEnum):
    #: Raw response stored (now or by an earlier attempt): project it.
    STORED = "STORED"
    #: The record is sealed (now or before): nothing to project.
    SEALED = "SEALED"
    #: The record is missing or expired.
    MISSING = "MISSING"
    #: Another attempt runs the call (this one was stale, or handed it to the next attempt):
    #: this attempt's project step must not run; the next attempt brings its own.
    HANDED_ON = "HANDED_ON"


@runtime_checkable
class AttemptSender(Protocol):
    """Sends a call's execute step again, for its next attempt (a dispatcher can)."""

    def send_attempt(
        self, key: CanonicalKey, *, attempt: int, queue: str, countdown_s: float = 0.0
    ) -> None:
        """Sends attempt ``attempt`` to ``queue`` after ``countdown_s``; raises on failure."""


@dataclass(frozen=True, slots=True)
class AttemptTerms:
    """How the execute step runs an attempt and hands a call to its next one."""

    #: Sends the next attempt; ``None``: a call is never retried from here.
    sender: AttemptSender | None = None
    #: How long a retried attempt may wait in its queue before the reaper may judge it lost
    #: (the boundary's ``max_pending_s``), and the grace past the run's deadline.
    max_pending_s: float = 3600.0
    reap_grace_s: float = 60.0
    #: At most one heartbeat write per call per this many seconds.
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    #: Sends the call's project step at once (a worker can). Called when the watchdog sealed
    #: a call whose tool runs in line and has not come back: the project step chained after
    #: this one would run only once the tool returns, and the call's waiters and monitoring
    #: learn its end from that step. ``None``: the chained step projects it when it runs.
    project_now: Callable[[CanonicalKey], None] | None = None


def failure(
    tool: str, code: ErrorCode, stage: Stage, exc: BaseException | None = None, note: str = ""
) -> Diagnostic:
    if exc is not None:
        return Diagnostic.of_exception(tool, code, stage, exc)
    return Diagnostic.of_note(tool, code, stage, note)


def seal_error(
    store: CanonicalStore,
    key: CanonicalKey,
    code: ErrorCode,
    diagnostic: Diagnostic | None = None,
    *,
    attempt: int | None = None,
) -> WriteStatus:
    """Seals the call ERROR ``code``; ``attempt``: the seal of that attempt (fenced: refused,
    ``SUPERSEDED``, once another attempt has the call)."""
    if diagnostic is not None:
        diagnostic.log(key.identity)
    status = store.seal_error(key, code, diagnostic=diagnostic, attempt=attempt)
    if status is WriteStatus.OK:
        telemetry.sealed(ToolOutcome.error(key.tool_call_id, code))
    # Codes only: the reason a call ended is never logged with its payload.
    logger.info("call %s sealed ERROR %s (%s)", key.identity, code.value, status.value)
    return status


@dataclass(frozen=True, slots=True)
class Holder:
    """The attempt an execute step runs: its fencing token, and where a refusal is noted."""

    store: CanonicalStore
    key: CanonicalKey
    tool: str
    attempt: int
    scope: CallScope | None = None

    def stale(self, step: str) -> ExecuteResult:
        """A step of this attempt was refused: another attempt has the call. Noted once per
        attempt; the step ends without projecting (the newer attempt brings its own)."""
        if self.scope is not None:
            self.scope.superseded(step)
        else:
            note_stale_holder(self.store, self.key, self.tool, self.attempt, step)
        return ExecuteResult.HANDED_ON

    def seal_error(self, code: ErrorCode, diagnostic: Diagnostic | None = None) -> ExecuteResult:
        """Seals the call ERROR as this attempt (fenced): ``SEALED``, or ``HANDED_ON`` when the
        attempt turned out stale."""
        written = seal_error(self.store, self.key, code, diagnostic, attempt=self.attempt)
        if written is WriteStatus.SUPERSEDED:
            return self.stale("seal")
        return ExecuteResult.SEALED


#: What the execute step answers when its call could not be handed to the next attempt.
NOT_STARTED = {
    WriteStatus.MISSING: ExecuteResult.MISSING,
    WriteStatus.NOT_PROJECTING: ExecuteResult.SEALED,
    WriteStatus.ALREADY_STORED: ExecuteResult.STORED,
    WriteStatus.SUPERSEDED: ExecuteResult.HANDED_ON,
    WriteStatus.REPLACED: ExecuteResult.HANDED_ON,
}


def next_attempt(
    store: CanonicalStore,
    sender: AttemptSender,
    key: CanonicalKey,
    spec: ToolSpec | None,
    *,
    attempt: int,
    backoff_s: float,
    max_pending_s: float,
    reap_grace_s: float,
    redispatch: bool,
    due_at: datetime | None = None,
    unstarted: bool = False,
    handback: bool = False,
) -> int | WriteStatus | None:
    """Moves the call's record from attempt ``attempt`` to the next one and sends it (after
    ``backoff_s``; ``redispatch``: the tool never started, a limited tool's slot is kept;
    ``handback``: a draining worker gives its running attempt up, ``boundary.handback``).

    The record's move is fenced (``CanonicalStore.retry_attempt``: ``due_at``, ``unstarted``
    re-checked in its script). Returns the new attempt's number once sent; the write status
    when the record did not move (sealed, stored, moved on or started by someone else
    meanwhile); ``None`` when it moved but its message could not be sent (logged by type:
    the record waits for that attempt and is due again after its queue wait)."""
    moved = store.retry_attempt(
        key,
        attempt=attempt,
        reap_after_s=backoff_s + max_pending_s,
        reap_grace_s=reap_grace_s,
        redispatch=redispatch,
        due_at=due_at,
        unstarted=unstarted,
        handback=handback,
    )
    if isinstance(moved, WriteStatus):
        return moved
    try:
        send_attempt(
            store, sender, key, spec, attempt=moved, countdown_s=backoff_s, keep=redispatch
        )
    except Exception as exc:
        logger.error("attempt %d of %s not sent: %s", moved, key.identity, type(exc).__name__)
        return None
    return moved


def send_attempt(
    store: CanonicalStore,
    sender: AttemptSender,
    key: CanonicalKey,
    spec: ToolSpec | None,
    *,
    attempt: int,
    countdown_s: float,
    keep: bool,
) -> None:
    """Sends attempt ``attempt`` of a call (its record moved on to it): at once, or for a
    limited tool, through its flow control (at once when a slot is free, else when its turn
    comes; ``keep``: an attempt that never started keeps the slot it held). Raises when the
    attempt cannot be sent or put in line."""
    queue = spec.queue if spec is not None else DEFAULT_QUEUE
    flow = store.flow
    if isinstance(flow, Flow) and spec is not None:
        handled = flow.requeue(key, spec.name, attempt=attempt, countdown_s=countdown_s, keep=keep)
        if handled is not None:
            return
    sender.send_attempt(key, attempt=attempt, queue=queue, countdown_s=countdown_s)


def seal_too_new(store: CanonicalStore, key: CanonicalKey, attempt: int | None) -> str:
    """Seals the call ERROR ``FORMAT_TOO_NEW`` (fenced to ``attempt`` when given, so a newer
    worker's attempt is never touched); the code the task fails with. A store that cannot say
    leaves the call to the reaper."""
    try:
        store.seal_error(key, ErrorCode.FORMAT_TOO_NEW, attempt=attempt)
    except Exception as exc:
        logger.error("call %s not sealed FORMAT_TOO_NEW: %s", key.identity, type(exc).__name__)
    return ErrorCode.FORMAT_TOO_NEW.value


def refuse_newer_message(
    store: CanonicalStore, request: Any, key: CanonicalKey, attempt: int | None
) -> str | None:
    """The code a task fails with when its message (``request``) is of a newer format than
    this code reads: logged with both versions and the call sealed ``FORMAT_TOO_NEW``;
    ``None`` when this code reads it."""
    found = formats.parse(formats.message_format(request))
    if found <= formats.CURRENT:
        return None
    formats.refused("task message", found)
    return seal_too_new(store, key, attempt)
