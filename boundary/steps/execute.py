"""The execute step: runs an attempt of a call's tool under its time limit, inside a call
context, and keeps its complete raw response (or holds it, checked, for the project step run
in line: ``HeldRaw``); a timed-out attempt is handed to the next one when the tool's retry
policy says so, a tool that could not start goes back to its queue. No tool's exception gets
out: each becomes a stable code on the record. Store errors do propagate (``StoreError``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, overload

from boundary import handback, telemetry
from boundary.call_context import CallCancelled, CallScope, Ended
from boundary.errors import ErrorCode, ToolTimeout
from boundary.flow import Flow
from boundary.handover import process_handover
from boundary.limits import Limits, canonical_json, utf8_size
from boundary.models import CanonicalKey, CanonicalRecord
from boundary.record_size import record_fits
from boundary.registry import ToolRegistry, ToolSpec
from boundary.steps.attempts import (
    EXECUTE,
    NOT_REGISTERED,
    NOT_STARTED,
    AttemptTerms,
    ExecuteResult,
    Holder,
    failure,
    next_attempt,
    seal_error,
)
from boundary.store.base import CanonicalStore, ClaimStatus, WriteStatus
from boundary.tool_threads import ToolOverdue, ToolThreadsExhausted, run_bounded

__all__ = ["HeldRaw", "execute_step", "keep_held"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeldRaw:
    """A raw response the execute step checked and did not write (``hold_raw=True``): the
    project step that runs next, in line, keeps it with the call's seal (``project_held``),
    or ``keep_held`` writes it alone. Until then it exists only here: a worker lost between
    the tool's return and that write runs the tool again, as one lost while the tool ran."""

    #: The record as the attempt's claim read it, its raw response set.
    record: CanonicalRecord
    _holder: Holder

    @property
    def attempt(self) -> int:
        return self._holder.attempt


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
        seal_error(store, key, ErrorCode.RUN_DEADLINE_EXCEEDED, attempt=attempt)
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
        return Holder(store, key, tool, attempt).seal_error(
            code, failure(tool, code, EXECUTE, note=NOT_REGISTERED)
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
    holder = Holder(store, key, tool, attempt, scope)
    timeouts: tuple[type[BaseException], ...] = (*timeout_errors, ToolTimeout)
    # A timeout the run's deadline caused is not retried (the next attempt would have no time
    # either).
    retry = timeout_s >= spec.timeout_s

    @handback.drainable  # a draining worker ends the run early (boundary.handback)
    def overdue() -> ExecuteResult:
        # On the watchdog's side, at the deadline, while the tool may still run in line.
        if handback.draining() and scope.time_left_s > 0:
            refused = handback.hand_back(store, key, spec, scope, terms)
            if refused is None:
                return ExecuteResult.HANDED_ON
            return NOT_STARTED.get(refused, ExecuteResult.SEALED)
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
            return holder.seal_error(code, failure(tool, code, EXECUTE, exc))
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


def _keep_raw(
    store: CanonicalStore, record: CanonicalRecord, raw: Any, holder: Holder, *, hold: bool
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
        return holder.seal_error(code, failure(tool, code, EXECUTE, exc))
    limits: Limits = store.limits
    if raw_size > limits.max_raw_bytes or (
        not record_fits(record, limits.max_record_bytes, raw=raw_text)
    ):
        # Not stored, not truncated, and the projector never sees it.
        note = f"raw response of {raw_size} bytes; max_raw_bytes {limits.max_raw_bytes}"
        code = ErrorCode.RESULT_TOO_LARGE
        return holder.seal_error(code, failure(tool, code, EXECUTE, note=note))
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
    store: CanonicalStore, record: CanonicalRecord, raw_text: str, holder: Holder
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
    holder: Holder,
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
    return holder.seal_error(code, failure(spec.name, code, EXECUTE, note=note))


def _redispatch(
    store: CanonicalStore, holder: Holder, spec: ToolSpec, terms: AttemptTerms
) -> ExecuteResult:
    """The tool could not start here: the call goes back to its queue as a new attempt."""
    if terms.sender is not None:
        handed = _hand_on(store, holder, spec, terms=terms, backoff_s=0.0, redispatch=True)
        if handed is not None:
            return handed
    code = ErrorCode.WORKER_LOST
    note = "every tool thread of the worker was held by hung tools"
    return holder.seal_error(code, failure(spec.name, code, EXECUTE, note=note))


def _hand_on(
    store: CanonicalStore,
    holder: Holder,
    spec: ToolSpec,
    *,
    terms: AttemptTerms,
    backoff_s: float,
    redispatch: bool = False,
) -> ExecuteResult | None:
    """Hands the call to its next attempt (``next_attempt``); ``None`` when that attempt could
    not be sent (the caller seals the call instead)."""
    assert terms.sender is not None
    key = holder.key
    moved = next_attempt(
        store,
        terms.sender,
        key,
        spec,
        attempt=holder.attempt,
        backoff_s=backoff_s,
        max_pending_s=terms.max_pending_s,
        reap_grace_s=terms.reap_grace_s,
        redispatch=redispatch,
    )
    if moved is None:
        return None
    if moved is WriteStatus.SUPERSEDED:
        return holder.stale("retry")
    if isinstance(moved, WriteStatus):
        return NOT_STARTED.get(moved, ExecuteResult.SEALED)
    logger.warning("call %s: attempt %d sent (in %.3gs)", key.identity, moved, backoff_s)
    return ExecuteResult.HANDED_ON
