"""The two steps of a call after its record exists, as plain functions.

``execute_step`` runs the tool and keeps its raw response; ``project_step`` projects it and
seals the record. A worker that projects in line (``Settings.project_in_line``) runs the
execute step with ``hold_raw=True`` and hands the response it held to ``project_held``, which
keeps it with the seal: one write fewer. Celery tasks (and the in-process dispatcher) are thin
wrappers around them. Neither lets a tool's or projector's exception out: each becomes a
stable code on the record. Store errors do propagate (``StoreError``): the caller decides
whether to retry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from operator import itemgetter
from typing import Any, Literal, Protocol, TypedDict, get_args, overload, runtime_checkable

from pydantic import BaseModel, ValidationError

from boundary import handback, telemetry
from boundary.call_context import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    CallCancelled,
    CallScope,
    Ended,
    note_stale_holder,
)
from boundary.call_steps import outcome_from_record
from boundary.diagnostics import Diagnostic, Stage
from boundary.errors import ErrorCode, ToolTimeout
from boundary.flow import Flow
from boundary.handover import process_handover
from boundary.limits import Limits, canonical_json, utf8_size
from boundary.models import (
    READY_EVIDENCE,
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    Projection,
    ToolOutcome,
)
from boundary.registry import DEFAULT_QUEUE, ToolRegistry, ToolSpec
from boundary.store.base import CanonicalStore, ClaimStatus, WriteStatus
from boundary.tool_threads import (
    DEFAULT_MAX_TOOL_THREADS,
    ToolOverdue,
    ToolThreadsExhausted,
    limit_tool_threads,
    run_bounded,
)

__all__ = [
    "DEFAULT_MAX_TOOL_THREADS",
    "DEFAULT_PROJECTION_TIMEOUT_S",
    "AttemptSender",
    "AttemptTerms",
    "ExecuteResult",
    "HeldRaw",
    "execute_step",
    "keep_held",
    "limit_tool_threads",
    "outcome_from_record",
    "project_held",
    "project_step",
    "send_attempt",
]

logger = logging.getLogger(__name__)

EXECUTE, PROJECT = Stage.EXECUTE, Stage.PROJECT
#: Seconds a projector may run before the call is sealed PROJECTION_FAILED. Projectors are
#: pure and small; one that runs this long is hung.
DEFAULT_PROJECTION_TIMEOUT_S = 30.0
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


def record_size(record: CanonicalRecord, **changes: Any) -> int:
    """UTF-8 bytes of the record's canonical JSON, with ``changes`` applied."""
    fields = record.model_dump(mode="json")
    fields.update(changes)
    return utf8_size(canonical_json(fields))


#: At most this many bytes of JSON for a value that is not text: a timestamp, an enum's
#: name, a number, a flag or null.
_SCALAR_JSON_BYTES = 64
#: The record's fields, and what their names, quotes, colons and commas take at most, with
#: the braces: the part of the bound every record shares.
_RECORD_FIELDS = tuple(CanonicalRecord.model_fields)
_RECORD_FRAME_BYTES = 2 + sum(len(name) + 4 for name in _RECORD_FIELDS)
#: Values that are scalars for certain, checked before the nested kinds (whose ``Mapping``
#: check is an ABC's, the dearest of them).
_SCALARS = (int, float, datetime, type(None))
#: The record's text fields (typed ``str`` or ``str | None``) and the others, scalars but for
#: the diagnostic. A text field takes at most 6 bytes a character plus 4 (its quotes, or
#: ``null``); any other at most ``_SCALAR_JSON_BYTES`` (an enum's longest name, if longer).
_TEXT_FIELDS = tuple(
    name
    for name, field in CanonicalRecord.model_fields.items()
    if field.annotation in (str, str | None)
)
_TEXT_SET = frozenset(_TEXT_FIELDS)


def _scalar_bytes(annotation: Any) -> int:
    kinds = get_args(annotation) or (annotation,)
    names = [
        len(member.value) + 2
        for kind in kinds
        if isinstance(kind, type) and issubclass(kind, StrEnum)
        for member in kind
    ]
    return max([_SCALAR_JSON_BYTES, *names])


_FIXED_BYTES = (
    _RECORD_FRAME_BYTES
    + 4 * len(_TEXT_FIELDS)
    + sum(
        _scalar_bytes(field.annotation)
        for name, field in CanonicalRecord.model_fields.items()
        if name not in _TEXT_SET
    )
)
_text_values = itemgetter(*_TEXT_FIELDS)


def _size_bound(record: CanonicalRecord, changes: Mapping[str, Any]) -> int | None:
    """An upper bound of ``record_size(record, **changes)`` without serializing the record, or
    ``None`` when it has a nested value (a diagnostic). A character of text takes at most 6
    bytes of JSON (a control character, written ``\\u001f``); a field's name, quotes, colon
    and comma at most its length plus 4.

    The record's fields hold their declared kinds (it was validated): only its text is
    measured, in one pass. A diagnostic, or a change that is not text given to a text field,
    is bounded field by field (``_any_size_bound``)."""
    values = record.__dict__
    if values["diagnostic"] is not None:
        return None
    if changes:
        values = {**values, **changes}
        for name, value in changes.items():
            if name not in _TEXT_SET or not (value is None or value.__class__ is str):
                return _any_size_bound(values)
    return _FIXED_BYTES + 6 * sum(map(len, filter(None, _text_values(values))))


def _any_size_bound(values: Mapping[str, Any]) -> int | None:
    """``_size_bound`` of the record's field values, whatever their kinds."""
    total = _RECORD_FRAME_BYTES
    for name in _RECORD_FIELDS:
        value = values[name]
        if isinstance(value, str):
            total += 6 * len(value) + 2
        elif isinstance(value, _SCALARS):
            total += _SCALAR_JSON_BYTES
        elif isinstance(value, BaseModel | Mapping | list):
            return None
        else:
            total += _SCALAR_JSON_BYTES
    return total


def record_fits(record: CanonicalRecord, max_bytes: int, **changes: Any) -> bool:
    """Whether the record, with ``changes`` applied, is at most ``max_bytes`` of canonical
    JSON. A record far under the limit (every call's, in practice) is settled by a bound;
    only one near it is serialized (``record_size``)."""
    bound = _size_bound(record, changes)
    if bound is not None and bound <= max_bytes:
        return True
    return record_size(record, **changes) <= max_bytes


def _seal_error(
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
class _Holder:
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
        written = _seal_error(self.store, self.key, code, diagnostic, attempt=self.attempt)
        if written is WriteStatus.SUPERSEDED:
            return self.stale("seal")
        return ExecuteResult.SEALED


@dataclass(frozen=True, slots=True)
class HeldRaw:
    """A raw response the execute step checked and did not write (``hold_raw=True``): the
    project step that runs next, in line, keeps it with the call's seal (``project_held``),
    or ``keep_held`` writes it alone. Until then it exists only here: a worker lost between
    the tool's return and that write runs the tool again, as one lost while the tool ran."""

    #: The record as the attempt's claim read it, its raw response set.
    record: CanonicalRecord
    _holder: _Holder

    @property
    def attempt(self) -> int:
        return self._holder.attempt


def _failed(
    tool: str, code: ErrorCode, stage: Stage, exc: BaseException | None = None, note: str = ""
) -> Diagnostic:
    if exc is not None:
        return Diagnostic.of_exception(tool, code, stage, exc)
    return Diagnostic.of_note(tool, code, stage, note)


@overload
def execute_step(
    store: CanonicalStore,
    registry: ToolRegistry,
    key: CanonicalKey,
    *,
    attempt: int = 1,
    terms: AttemptTerms | None = None,
    timeout_errors: tuple[type[BaseException], ...] = (),
    now: datetime | None = None,
    hold_raw: Literal[False] = False,
) -> ExecuteResult: ...


@overload
def execute_step(
    store: CanonicalStore,
    registry: ToolRegistry,
    key: CanonicalKey,
    *,
    attempt: int = 1,
    terms: AttemptTerms | None = None,
    timeout_errors: tuple[type[BaseException], ...] = (),
    now: datetime | None = None,
    hold_raw: bool,
) -> ExecuteResult | HeldRaw: ...


def execute_step(
    store: CanonicalStore,
    registry: ToolRegistry,
    key: CanonicalKey,
    *,
    attempt: int = 1,
    terms: AttemptTerms | None = None,
    timeout_errors: tuple[type[BaseException], ...] = (),
    now: datetime | None = None,
    hold_raw: bool = False,
) -> ExecuteResult | HeldRaw:
    """Runs attempt ``attempt`` of the call's tool and keeps its complete raw response.

    With ``hold_raw``, a response that passes the size checks is not written: it comes back
    as a ``HeldRaw`` for ``project_held`` (or ``keep_held``) to keep, and every other end is
    the same.

    Idempotent: a record that already holds a raw response, or is sealed, is not run again;
    a record that another attempt took over is left to it (``HANDED_ON``). The tool runs at
    most ``ToolSpec.timeout_s``, never past the run's deadline, inside a call context
    (``heartbeat()``, ``current_call()``). A timed-out attempt is sent again when the tool's
    retry policy says so. ``timeout_errors`` are extra exception types that mean the tool ran
    out of time (e.g. Celery's ``SoftTimeLimitExceeded``).
    """
    terms = terms or AttemptTerms()
    # One round trip: the claim reads the record and, when the tool may run, stamps it started
    # (the store's clock; a tool with a heartbeat timeout is due once silent that long).
    silent = registry.silent_after(terms.reap_grace_s)
    claim = store.claim(key, attempt=attempt, heartbeat_timeouts=silent)
    if claim.status is ClaimStatus.PAST_DEADLINE:
        # The deadline passed while the call waited for a worker: the tool never runs.
        _seal_error(store, key, ErrorCode.RUN_DEADLINE_EXCEEDED, attempt=attempt)
        return ExecuteResult.SEALED
    if claim.record is None:
        return _NOT_CLAIMED[claim.status]
    record = claim.record
    telemetry.step_record(record)
    spec = registry.get(record.tool_name)
    tool = record.tool_name
    if spec is None:
        # The worker's registry lacks a tool the caller's had: a deployment mismatch.
        code = ErrorCode.TOOL_EXECUTION_FAILED
        return _Holder(store, key, tool, attempt).seal_error(
            code, _failed(tool, code, EXECUTE, note=NOT_REGISTERED)
        )
    # The tool's own limit, cut short by the run's deadline (on the store's clock).
    now = now or claim.now or datetime.now(UTC)
    # A rate-limited tool's start enters its rate window now (one round trip; none for a
    # tool without limits).
    flow = store.flow
    started_at = flow.started(key, tool, attempt) if isinstance(flow, Flow) else None
    timeout_s = spec.timeout_s
    if record.deadline is not None:
        timeout_s = min(timeout_s, (record.deadline - now).total_seconds())
    scope = CallScope(
        store,
        key,
        tool_name=tool,
        attempt=attempt,
        time_limit_s=timeout_s,
        deadline=record.deadline,
        # Each heartbeat renews the call's lease (its reap time) by this much.
        heartbeat_timeout_s=spec.lease_s,
        interval_s=terms.heartbeat_interval_s,
        started_at=started_at or claim.now,
    )
    # Every later step of this attempt names it: a step refused as stale ends the attempt.
    holder = _Holder(store, key, tool, attempt, scope)
    timeouts: tuple[type[BaseException], ...] = (*timeout_errors, ToolTimeout)
    # A timeout the run's deadline caused is not retried (the next attempt would have no time
    # either).
    retry = timeout_s >= spec.timeout_s

    @handback.drainable  # a draining worker ends the run early (boundary.handback)
    def overdue() -> ExecuteResult:
        # On the watchdog's side, at the deadline, while the tool may still run in line.
        if handback.draining() and scope.time_left_s > 0:
            sender = terms.sender
            refused = handback.hand_back(
                store,
                key,
                scope,
                send=None
                if sender is None
                else lambda moved: send_attempt(
                    store, sender, key, spec, attempt=moved, countdown_s=0.0, keep=False
                ),
                reap_after_s=terms.max_pending_s,
                reap_grace_s=terms.reap_grace_s,
            )
            if refused is None:
                return ExecuteResult.HANDED_ON
            return _NOT_STARTED.get(refused, ExecuteResult.SEALED)
        scope.end(Ended.TIME_UP)  # the tool's next heartbeat raises CallCancelled
        ended = _timed_out(store, holder, spec, terms=terms, timeout_s=timeout_s, retry=retry)
        if ended is ExecuteResult.SEALED and terms.project_now is not None:
            terms.project_now(key)
            return ExecuteResult.HANDED_ON  # the step sent now projects it, not the chain's
        return ended

    telemetry.tool_starts(record)
    try:
        raw = run_bounded(
            scope.runner(spec.executor),
            json.loads(record.request),
            timeout_s,
            tool=tool,
            max_concurrency=spec.max_concurrency,
            on_overdue=overdue,
        )
    except ToolOverdue as late:
        if isinstance(late.outcome, ExecuteResult):
            return late.outcome
        # The watchdog could not end the call (the store failed under it): end it here.
    except ToolThreadsExhausted:
        # Every tool thread is held by hung runs: the tool never started here. Sent again
        # (another worker, or this one once restarted, takes it) whatever the retry policy.
        return _redispatch(store, holder, spec, terms)
    except timeouts:
        pass  # ended below
    except Exception as exc:
        ended = scope.ended if isinstance(exc, CallCancelled) else None
        if ended is Ended.SEALED:
            return ExecuteResult.SEALED  # cancelled or reaped: the record decides
        if ended is Ended.SUPERSEDED:
            return ExecuteResult.HANDED_ON
        if ended is not Ended.TIME_UP:
            # The text may hold secrets: only the exception's type and frame are kept.
            code = ErrorCode.TOOL_EXECUTION_FAILED
            return holder.seal_error(code, _failed(tool, code, EXECUTE, exc))
    else:
        if scope.ended is Ended.SUPERSEDED:
            # Told at a heartbeat that another attempt has the call, the tool returned anyway.
            return ExecuteResult.HANDED_ON
        return _keep_raw(store, record, raw, holder, hold=hold_raw)
    # Out of time: its limit passed, or the tool saw it at a heartbeat.
    scope.end(Ended.TIME_UP)  # a tool still running raises CallCancelled at its next heartbeat
    return _timed_out(store, holder, spec, terms=terms, timeout_s=timeout_s, retry=retry)


#: What the execute step answers when its claim did not start the tool.
_NOT_CLAIMED = {
    ClaimStatus.MISSING: ExecuteResult.MISSING,
    ClaimStatus.SEALED: ExecuteResult.SEALED,
    ClaimStatus.STORED: ExecuteResult.STORED,
    ClaimStatus.SUPERSEDED: ExecuteResult.HANDED_ON,
}

#: What the execute step answers when its call could not be handed to the next attempt.
_NOT_STARTED = {
    WriteStatus.MISSING: ExecuteResult.MISSING,
    WriteStatus.NOT_PROJECTING: ExecuteResult.SEALED,
    WriteStatus.ALREADY_STORED: ExecuteResult.STORED,
    WriteStatus.SUPERSEDED: ExecuteResult.HANDED_ON,
    WriteStatus.REPLACED: ExecuteResult.HANDED_ON,
}


def _keep_raw(
    store: CanonicalStore, record: CanonicalRecord, raw: Any, holder: _Holder, *, hold: bool
) -> ExecuteResult | HeldRaw:
    """Size-checks the raw response and keeps it in the record (never truncated), as the
    holder's attempt: refused once another attempt has the call (the stale response is
    dropped; the newer attempt's decides). ``hold``: returns it checked, unwritten."""
    tool = record.tool_name
    try:
        raw_text = canonical_json(raw)
        raw_size = utf8_size(raw_text)
    except Exception as exc:
        # Not JSON data, or objects whose own code raises while being serialized (a mapping
        # whose ``items()`` fails): either way the response cannot be kept.
        code = ErrorCode.SERIALIZATION_FAILED
        return holder.seal_error(code, _failed(tool, code, EXECUTE, exc))
    limits: Limits = store.limits
    if raw_size > limits.max_raw_bytes or (
        not record_fits(record, limits.max_record_bytes, raw=raw_text)
    ):
        # Not stored, not truncated, and the projector never sees it.
        note = f"raw response of {raw_size} bytes; max_raw_bytes {limits.max_raw_bytes}"
        code = ErrorCode.RESULT_TOO_LARGE
        return holder.seal_error(code, _failed(tool, code, EXECUTE, note=note))
    if hold:
        return HeldRaw(record.model_copy(update={"raw": raw_text}), holder)
    return _write_raw(store, record, raw_text, holder)


def keep_held(store: CanonicalStore, held: HeldRaw) -> ExecuteResult:
    """Writes a held raw response alone (``store_raw``), as its attempt: what the execute step
    would have done without ``hold_raw``; the call's project step then projects it."""
    raw = held.record.raw
    assert raw is not None  # a held record always carries its response
    return _write_raw(store, held.record, raw, held._holder)


def _write_raw(
    store: CanonicalStore, record: CanonicalRecord, raw_text: str, holder: _Holder
) -> ExecuteResult:
    written, stored = store.store_raw_into(record, raw_text, attempt=holder.attempt)
    if stored is not None:
        # The project step of this call, if it runs in this process, need not read it back.
        process_handover().put(stored)
    if written in (WriteStatus.OK, WriteStatus.ALREADY_STORED):
        telemetry.stored()
        return ExecuteResult.STORED
    if written is WriteStatus.MISSING:
        return ExecuteResult.MISSING
    if written is WriteStatus.SUPERSEDED:
        return holder.stale("raw response")
    return ExecuteResult.SEALED


def _timed_out(
    store: CanonicalStore,
    holder: _Holder,
    spec: ToolSpec,
    *,
    terms: AttemptTerms,
    timeout_s: float,
    retry: bool,
) -> ExecuteResult:
    """The attempt ran past its time limit: the next attempt when the policy says so, else
    the call is sealed TOOL_TIMEOUT (both only while the attempt is the call's current one)."""
    key, attempt = holder.key, holder.attempt
    if retry and terms.sender is not None:
        state = store.attempt_state(key)
        made = state.tool_runs if state is not None else attempt
        if spec.retry.retries(ErrorCode.TOOL_TIMEOUT, made):
            backoff_s = spec.retry.backoff(made)
            handed = _hand_on(store, holder, spec, terms=terms, backoff_s=backoff_s)
            if handed is not None:
                return handed
    note = f"the tool ran past its time limit ({max(timeout_s, 0):.3g} s)"
    code = ErrorCode.TOOL_TIMEOUT
    return holder.seal_error(code, _failed(spec.name, code, EXECUTE, note=note))


def _redispatch(
    store: CanonicalStore, holder: _Holder, spec: ToolSpec, terms: AttemptTerms
) -> ExecuteResult:
    """The tool could not start here: the call goes back to its queue as a new attempt."""
    if terms.sender is not None:
        handed = _hand_on(store, holder, spec, terms=terms, backoff_s=0.0, redispatch=True)
        if handed is not None:
            return handed
    code = ErrorCode.WORKER_LOST
    note = "every tool thread of the worker was held by hung tools"
    return holder.seal_error(code, _failed(spec.name, code, EXECUTE, note=note))


def _hand_on(
    store: CanonicalStore,
    holder: _Holder,
    spec: ToolSpec,
    *,
    terms: AttemptTerms,
    backoff_s: float,
    redispatch: bool = False,
) -> ExecuteResult | None:
    """Moves the record to the next attempt and sends it; ``None`` when it could not be
    sent (the caller seals the call instead)."""
    assert terms.sender is not None
    key = holder.key
    moved = store.retry_attempt(
        key,
        attempt=holder.attempt,
        reap_after_s=backoff_s + terms.max_pending_s,
        reap_grace_s=terms.reap_grace_s,
        redispatch=redispatch,
    )
    if moved is WriteStatus.SUPERSEDED:
        return holder.stale("retry")
    if isinstance(moved, WriteStatus):
        return _NOT_STARTED.get(moved, ExecuteResult.SEALED)
    try:
        send_attempt(
            store,
            terms.sender,
            key,
            spec,
            attempt=moved,
            countdown_s=backoff_s,
            keep=redispatch,
        )
    except Exception:
        logger.error("attempt %d of %s not sent", moved, key.identity)
        return None
    logger.warning("call %s: attempt %d sent (in %.3gs)", key.identity, moved, backoff_s)
    return ExecuteResult.HANDED_ON


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


def _validated(value: object) -> Projection | ErrorCode:
    if isinstance(value, Projection):
        projection = value
    elif isinstance(value, Mapping):
        try:
            projection = Projection.model_validate(dict(value))
        except ValidationError as exc:
            if any(err["loc"][:1] == ("evidence_status",) for err in exc.errors()):
                return ErrorCode.INVALID_EVIDENCE_STATUS
            return ErrorCode.PROJECTION_FAILED
    else:
        return ErrorCode.PROJECTION_FAILED
    if projection.evidence_status not in READY_EVIDENCE:
        return ErrorCode.INVALID_EVIDENCE_STATUS
    return projection


def project_step(
    store: CanonicalStore,
    registry: ToolRegistry,
    key: CanonicalKey,
    *,
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
    project_now: Callable[[CanonicalKey], None] | None = None,
) -> ToolOutcome:
    """Projects the stored raw response and seals the record READY or ERROR.

    The projector runs at most ``timeout_s``; past it the call is sealed PROJECTION_FAILED.
    A projector run in line that overruns is sealed by the watchdog, which then calls
    ``project_now(key)`` (a worker sends this step again, so the call's waiters hear of the
    seal without waiting for the projector to come back).

    Returns the call's outcome: the bounded agent result, or a stable error code.
    """
    # Left by this call's execute step in this process (see ``boundary.handover``): then the
    # seal names its creation time, so a later call under the same ids is never sealed.
    record = process_handover().take(key)
    handed_over = record.created_at if record is not None else None
    if record is None:
        record = store.get(key)
    if record is None:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
    telemetry.step_record(record)
    sealed = outcome_from_record(record)
    if sealed is not None:
        return sealed
    written, outcome = _project_record(
        store, registry, record, handed_over, timeout_s=timeout_s, project_now=project_now
    )
    if written is None or written is WriteStatus.OK:
        return outcome
    if written is WriteStatus.REPLACED:
        # The handed-over record had expired and another call took its ids: project that
        # one, as read from the store.
        return project_step(store, registry, key, timeout_s=timeout_s, project_now=project_now)
    # Someone else (the reaper, a redelivered message) sealed it first: the record decides.
    return _final_outcome(store, key)


def project_held(
    store: CanonicalStore,
    registry: ToolRegistry,
    held: HeldRaw,
    *,
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
    project_now: Callable[[CanonicalKey], None] | None = None,
) -> ToolOutcome | ExecuteResult:
    """``project_step`` of a raw response the execute step held (``hold_raw=True``): projects
    it and seals the record with it, in one write fenced by the attempt, so the record never
    holds the response without its seal.

    Returns the call's outcome; or, when the seal was refused, how the execute step ends as
    the write of the response alone would have ended it: ``HANDED_ON`` (another attempt has
    the call), ``SEALED`` (sealed by someone else: the record decides), ``MISSING``.
    """
    record = held.record
    key = record.key
    telemetry.step_record(record)
    written, outcome = _project_record(
        store,
        registry,
        record,
        record.created_at,
        timeout_s=timeout_s,
        project_now=project_now,
        held=held,
    )
    if written is None:
        return outcome
    if written is WriteStatus.OK:
        telemetry.stored()
        return outcome
    if written is WriteStatus.ALREADY_STORED:
        # A response is kept already (not this attempt's): the record decides.
        return project_step(store, registry, key, timeout_s=timeout_s, project_now=project_now)
    if written is WriteStatus.SUPERSEDED:
        return held._holder.stale("raw response")
    if written is WriteStatus.NOT_PROJECTING:
        return ExecuteResult.SEALED
    # MISSING, or REPLACED: the record this attempt claimed is gone.
    return ExecuteResult.MISSING


def _project_record(
    store: CanonicalStore,
    registry: ToolRegistry,
    record: CanonicalRecord,
    handed_over: datetime | None,
    *,
    timeout_s: float,
    project_now: Callable[[CanonicalKey], None] | None,
    held: HeldRaw | None = None,
) -> tuple[WriteStatus | None, ToolOutcome]:
    """Projects the record's raw response and seals it (with the held response, as its
    attempt, when ``held``): the seal's write status and the outcome; ``None``: the watchdog
    sealed it (its outcome)."""
    key = record.key
    spec = registry.get(record.tool_name)
    version = spec.projector_version if spec is not None else None
    kept: KeptTerms = {} if held is None else {"raw": record.raw, "attempt": held.attempt}

    def overdue() -> ToolOutcome:
        # On the watchdog's side, at the deadline, while the projector may still run in line.
        note = f"the projector ran past its time limit of {timeout_s:g}s"
        failed = _failed(record.tool_name, ErrorCode.PROJECTION_FAILED, PROJECT, note=note)
        written = _seal_failed_projection(store, key, failed, handed_over, version, kept=kept)
        outcome = _final_outcome(store, key)
        if written is WriteStatus.OK:
            if held is not None:
                telemetry.stored()
            telemetry.sealed(outcome)
        if project_now is not None:
            project_now(key)
        return outcome

    try:
        projected = project_raw(registry, record, store.limits, timeout_s, overdue)
    except ToolOverdue as late:
        if isinstance(late.outcome, ToolOutcome):
            return None, late.outcome
        # The watchdog could not seal it (the store failed under it): seal it here.
        note = f"the projector ran past its time limit of {timeout_s:g}s"
        projected = _failed(record.tool_name, ErrorCode.PROJECTION_FAILED, PROJECT, note=note)
    if isinstance(projected, Diagnostic):
        written = _seal_failed_projection(store, key, projected, handed_over, version, kept=kept)
        outcome = ToolOutcome.error(key.tool_call_id, projected.error_code)
    else:
        outcome, result, scope = projected
        assert outcome.evidence_status is not None  # a READY outcome always has one
        written = store.seal(
            key,
            evidence_status=outcome.evidence_status,
            agent_result=result,
            scope=scope,
            created_at=handed_over,
            projector_version=version,
            **kept,
        )
    if written is WriteStatus.OK:
        telemetry.sealed(outcome)
    return written, outcome


class KeptTerms(TypedDict, total=False):
    """What a seal of a held response adds to its terms: the response, and its attempt."""

    raw: str | None
    attempt: int | None


def _seal_failed_projection(
    store: CanonicalStore,
    key: CanonicalKey,
    failed: Diagnostic,
    handed_over: datetime | None,
    version: str | None,
    *,
    kept: KeptTerms,
) -> WriteStatus:
    """Seals the call ERROR with the diagnostic's code (a projection that failed)."""
    failed.log(key.identity)
    written = store.seal(
        key,
        evidence_status=EvidenceStatus.ERROR,
        error_code=failed.error_code,
        diagnostic=failed,
        created_at=handed_over,
        projector_version=version,
        **kept,
    )
    logger.info("call %s sealed ERROR %s", key.identity, failed.error_code.value)
    return written


def project_raw(
    registry: ToolRegistry,
    record: CanonicalRecord,
    limits: Limits,
    timeout_s: float,
    on_overdue: Callable[[], ToolOutcome] | None = None,
) -> tuple[ToolOutcome, str, str | None] | Diagnostic:
    """The READY outcome with its result and scope as canonical JSON, or why it failed (the
    diagnostic carries the code to seal ERROR with): the record's raw response projected by
    its tool's projector in ``registry``, with the checks of a seal. Writes nothing (a
    re-projection uses it too: ``boundary.reprojection``)."""
    tool = record.tool_name
    spec = registry.get(tool)
    if spec is None:
        return _failed(tool, ErrorCode.PROJECTION_FAILED, PROJECT, note=NOT_REGISTERED)
    if record.raw is None:
        # The execute step ended without keeping a response: the store failed under it.
        note = "no raw response was kept"
        return _failed(tool, ErrorCode.STORE_UNAVAILABLE, PROJECT, note=note)
    raw, request = json.loads(record.raw), json.loads(record.request)
    try:
        # Under a time limit (on a tool thread, or in line under the watchdog): a hung
        # projector must not hold the worker's projection slot (and every later call behind
        # it) nor its warm shutdown.
        value = run_bounded(
            lambda _: spec.projector.project(raw, request), None, timeout_s, on_overdue=on_overdue
        )
    except ToolOverdue:
        raise
    except ToolTimeout:
        note = f"the projector ran past its time limit of {timeout_s:g}s"
        return _failed(tool, ErrorCode.PROJECTION_FAILED, PROJECT, note=note)
    except Exception as exc:
        return _failed(tool, ErrorCode.PROJECTION_FAILED, PROJECT, exc)
    projection = _validated(value)
    if isinstance(projection, ErrorCode):
        note = f"the projector returned {type(value).__name__}, not a valid Projection"
        return _failed(tool, projection, PROJECT, note=note)
    try:
        result = canonical_json(projection.result)
        scope = None if projection.scope is None else canonical_json(projection.scope)
        agent_bytes = utf8_size(result) + (utf8_size(scope) if scope else 0)
    except Exception as exc:  # as for raw responses: anything raised while serializing
        return _failed(tool, ErrorCode.SERIALIZATION_FAILED, PROJECT, exc)
    if agent_bytes > limits.max_agent_result_bytes or (
        not record_fits(record, limits.max_record_bytes, agent_result=result, scope=scope)
    ):
        note = f"agent result of {agent_bytes} bytes; max {limits.max_agent_result_bytes}"
        return _failed(tool, ErrorCode.RESULT_TOO_LARGE, PROJECT, note=note)
    outcome = ToolOutcome(
        tool_call_id=record.tool_call_id,
        status=InvocationStatus.READY,
        evidence_status=projection.evidence_status,
        # Parsed back from the canonical text, so the outcome equals what a later read gives.
        result=json.loads(result),
        scope=None if scope is None else json.loads(scope),
    )
    return outcome, result, scope


def _final_outcome(store: CanonicalStore, key: CanonicalKey) -> ToolOutcome:
    """Reads back what the record says now: whoever sealed it decided."""
    record = store.get(key, with_raw=False)
    if record is None:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
    return outcome_from_record(record) or ToolOutcome.error(
        key.tool_call_id, ErrorCode.STORE_UNAVAILABLE
    )
