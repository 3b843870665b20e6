"""``ToolBoundary``'s blocking calls: submit, wait, invoke, observe, cancel.

The steps both paths share are in ``call_steps``; this module adds the I/O between them,
on the sync store and the dispatcher. It never imports the async path or ``core``.
"""

from __future__ import annotations

import logging
import time

from boundary import telemetry
from boundary.call_steps import (
    dispatch_failed,
    give_up_at,
    key_of,
    outcome_from_record,
    prepare,
    refuse,
    rejected,
    settled,
    time_left,
)
from boundary.dispatch import Revoker, dispatch_call
from boundary.door import CallTerms
from boundary.errors import ErrorCode, StoreError
from boundary.models import (
    CallProgress,
    CanonicalKey,
    InvocationStatus,
    ObservedFacts,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
    is_safe_id,
)
from boundary.store.base import WriteStatus

logger = logging.getLogger(__name__)


@telemetry.traced_submit
def submit(
    terms: CallTerms, envelope: ToolCallEnvelope, run: RunContext, *, replay: bool = False
) -> Submission:
    """``ToolBoundary.submit``: preflight, create the PROJECTING record, dispatch."""
    prepared = prepare(terms, envelope, run)
    if isinstance(prepared, Submission):
        return prepared
    key = prepared.key
    try:
        created = terms.store.create(key, **prepared.create)
    except StoreError:
        return rejected(envelope, key, ErrorCode.STORE_UNAVAILABLE)
    refused = refuse(envelope, key, created, replay=replay)
    if refused is not None:
        return refused
    try:
        dispatch_call(terms.dispatcher, key, prepared.queue)
    except Exception:
        # Broker down, or anything else: the call will never run, so it must not stay
        # PROJECTING. The exception's text is dropped (it may hold a broker URL).
        logger.warning("dispatch of %s failed; sealing DISPATCH_FAILED", key.identity)
        return seal_dispatch_failed(terms, key)
    return Submission(key=key, accepted=True)


def seal_dispatch_failed(terms: CallTerms, key: CanonicalKey) -> Submission:
    """Seals a call that could not be dispatched; answers what its record then says."""
    try:
        terms.store.seal_error(key, ErrorCode.DISPATCH_FAILED)
        record = terms.store.get(key, with_raw=False)
    except StoreError:
        record = None
    return dispatch_failed(key, record)


def invoke(
    terms: CallTerms,
    envelope: ToolCallEnvelope,
    run: RunContext,
    timeout: float | None,
    *,
    replay: bool = False,
) -> ToolOutcome:
    """``ToolBoundary.invoke``: ``submit`` then wait, ``timeout`` bounding both."""
    give_up = give_up_at(timeout)
    submission = submit(terms, envelope, run, replay=replay)
    if submission.outcome is not None:
        return submission.outcome
    assert submission.key is not None
    # Just dispatched: wait first, then read. A replayed call may be sealed long ago.
    return await_outcome(terms, submission.key, give_up, read_first=submission.replayed)


def outcome(terms: CallTerms, run_id: str, tool_call_id: str, timeout: float | None) -> ToolOutcome:
    """``ToolBoundary.outcome``: RECORD_NOT_FOUND at once for ids no record has."""
    key = key_of(run_id, tool_call_id)
    if key is None:
        return ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
    return await_outcome(terms, key, give_up_at(timeout), read_first=True)


def await_outcome(
    terms: CallTerms, key: CanonicalKey, give_up: float | None, *, read_first: bool
) -> ToolOutcome:
    """Waits through the dispatcher in slices of at most ``poll_s`` until the monotonic
    time ``give_up``, reading the record between slices, so a result that is never
    written (the reaper sealed the record) or a missed wake-up cannot hang.

    The record decides, never the dispatcher's value: the project step seals the record
    before its result is written, so a result seen while the record is still PROJECTING
    is a stale one (of an expired record with the same ids) and is ignored. The last read
    comes after the last slice, so a wait that runs out still returns the real state.
    """
    # Set once the dispatcher's wait is of no use: only the record is polled from then on.
    poll_only = False
    read = read_first
    while True:
        if read:
            try:
                record = terms.store.get(key, with_raw=False)
            except StoreError:
                return ToolOutcome.error(key.tool_call_id, ErrorCode.STORE_UNAVAILABLE)
            done = settled(key, record)
            if done is not None:
                return done
            assert record is not None
        left = time_left(give_up)
        if left is not None and left <= 0:
            if read:
                return ToolOutcome.running(key.tool_call_id, CallProgress.of(record))
            # Out of time before the first read (invoke's submit used it all): read once.
            read = True
            continue
        read = True
        slice_s = terms.poll_s if left is None else min(left, terms.poll_s)
        if poll_only:
            time.sleep(slice_s)
            continue  # back to reading the record
        started = time.monotonic()
        if terms.dispatcher.wait(key, slice_s) is not None:
            # Woken by a result: read the record once more; if it is still PROJECTING,
            # that result was stale and only the record is polled from now on.
            poll_only = True
        elif time.monotonic() - started < slice_s / 2:
            # The dispatcher cannot wait (it knows nothing of this call): poll the record
            # every slice rather than spin on it.
            poll_only = True


def observe(terms: CallTerms, run_id: str) -> ObservedFacts:
    """``ToolBoundary.observe``: the run's READY calls as bounded observed facts."""
    if not is_safe_id(run_id):
        # No record is ever created under an unsafe id (preflight refuses it), and such
        # an id (a lone surrogate, say) cannot even be encoded for Redis: nothing to see.
        return terms.run_projector.project(run_id, [], now=terms.clock())
    entries = terms.store.progress(run_id)
    return terms.run_projector.project(run_id, entries, now=terms.clock())


def close_run(terms: CallTerms, run_id: str) -> bool:
    """``ToolBoundary.close_run``: closes the run, then cancels its PROJECTING calls."""
    closed = terms.store.close_run(run_id)
    if is_safe_id(run_id):
        for entry in terms.store.progress(run_id):
            record = entry.record
            if record is not None and record.status is InvocationStatus.PROJECTING:
                cancel(terms, run_id, record.tool_call_id)
    return closed


def cancel(terms: CallTerms, run_id: str, tool_call_id: str) -> ToolOutcome:
    """``ToolBoundary.cancel``: seals a PROJECTING call CANCELLED, then revokes its work."""
    key = key_of(run_id, tool_call_id)
    if key is None:
        return ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
    try:
        written = terms.store.seal_error(key, ErrorCode.CANCELLED)
        if written is WriteStatus.OK:
            revoke(terms, key)
            return ToolOutcome.error(key.tool_call_id, ErrorCode.CANCELLED)
        record = None if written is WriteStatus.MISSING else terms.store.get(key, with_raw=False)
    except StoreError:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.STORE_UNAVAILABLE)
    if record is None:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
    return outcome_from_record(record) or ToolOutcome.error(
        key.tool_call_id, ErrorCode.STORE_UNAVAILABLE
    )


def revoke(terms: CallTerms, key: CanonicalKey) -> None:
    """Best effort: the record is sealed already, so work that still runs changes nothing."""
    if not isinstance(terms.dispatcher, Revoker):
        return
    try:
        terms.dispatcher.revoke(key)
    except Exception:
        # The text may name a broker URL: only that it failed is logged.
        logger.warning("revoke of cancelled call %s failed", key.identity)
