"""``ToolBoundary``'s blocking calls: submit, wait, invoke, observe, cancel.

The steps both paths share are in ``call_steps``; this module adds the I/O between them,
on the sync store and the dispatcher; its waits run the one loop of ``waits``. It never
imports the async path or ``core``.
"""

from __future__ import annotations

import logging

from boundary import telemetry
from boundary.call_steps import (
    Prepared,
    dispatch_failed,
    give_up_at,
    key_of,
    outcome_from_record,
    prepare,
    refuse,
    time_left,
    turned_away,
)
from boundary.dispatch import Revoker, dispatch_call
from boundary.door import CallTerms
from boundary.errors import ErrorCode, StoreError, failure_name
from boundary.flow import Flow
from boundary.models import (
    CanonicalKey,
    InvocationStatus,
    ObservedFacts,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
    is_safe_id,
)
from boundary.reprojection import observe_version
from boundary.store.base import WriteStatus
from boundary.store.flow import Admitted, ToolLimits
from boundary.waits import await_outcome, await_seal, seal_watch, wait_slice

logger = logging.getLogger(__name__)


@telemetry.traced_submit
def submit(
    terms: CallTerms,
    envelope: ToolCallEnvelope,
    run: RunContext,
    *,
    replay: bool = False,
    watched: bool = False,
) -> Submission:
    """``ToolBoundary.submit``: preflight, create the PROJECTING record, dispatch.

    A limited tool's call (flow control) asks for a slot, or a place in line, before its
    record is created, so a call refused for a full line (TOOL_BUSY) leaves nothing created
    or charged: one round trip more than an unlimited call when a slot is free, two when
    the call must wait (it joins the line once its record exists, and is sent when a slot
    is handed to it). Whatever was taken is given back when the call is not created.

    When the run's seal channel is subscribed already in this process (a call of the run
    waited on a moment ago), an unlimited call's new record is covered on it
    (``SyncSealWatch.cover``): a later ``outcome`` needs no read first. ``watched``: the
    caller (``invoke``) watches the call itself."""
    prepared = prepare(terms, envelope, run)
    if isinstance(prepared, Submission):
        return prepared
    key, tool = prepared.key, prepared.create["tool_name"]
    flow = terms.store.flow
    limits = flow.limits(tool) if isinstance(flow, Flow) else None
    admitted: Admitted | None = None
    if limits is not None:
        assert isinstance(flow, Flow)
        answer = admit(terms, flow, limits, prepared, run=run)
        if isinstance(answer, Submission):
            return answer
        admitted = answer
    watch = None if watched or limits is not None else seal_watch(terms, key)
    ticket = None if watch is None else watch.ticket()
    try:
        created = terms.store.create(key, **prepared.create)
    except StoreError:
        give_back(flow, key, tool, limits, admitted)
        return turned_away(key, ErrorCode.STORE_UNAVAILABLE)
    refused = refuse(key, created, replay=replay)
    if refused is not None:
        give_back(flow, key, tool, limits, admitted)
        return refused
    if watch is not None:
        watch.cover(ticket)
    if limits is not None and admitted not in (Admitted.GRANTED, Admitted.HOLDS):
        assert isinstance(flow, Flow)
        try:
            # In line now; sent at once if a slot is free meanwhile (among the reply's grants).
            flow.confirm(key, tool, limits)
        except StoreError:
            # Accepted all the same: the reaper puts a call admitted and never put in line
            # in it.
            logger.warning(
                "flow control: %s not put in line (store); the reaper will", key.identity
            )
        return Submission(key=key, accepted=True)
    try:
        dispatch_call(terms.dispatcher, key, prepared.queue)
    except Exception as exc:
        # Broker down, or anything else: the call will never run, so it must not stay
        # PROJECTING (the seal gives a limited call's slot up). The exception's text is
        # dropped (it may hold a broker URL): only its type is logged.
        logger.warning(
            "dispatch of %s failed (%s); sealing DISPATCH_FAILED", key.identity, failure_name(exc)
        )
        return seal_dispatch_failed(terms, key)
    return Submission(key=key, accepted=True)


def admit(
    terms: CallTerms,
    flow: Flow,
    limits: ToolLimits,
    prepared: Prepared,
    *,
    run: RunContext,
) -> Admitted | Submission:
    """A limited call's admission, asked for before its record exists: what it said, or the
    call refused (TOOL_BUSY: its line is full and the call is new; STORE_UNAVAILABLE)."""
    key = prepared.key
    try:
        admitted = flow.admit(key, prepared.create["tool_name"], limits, run).admitted
        if admitted is Admitted.BUSY and terms.store.get(key, with_raw=False) is None:
            return turned_away(key, ErrorCode.TOOL_BUSY)
    except StoreError:
        return turned_away(key, ErrorCode.STORE_UNAVAILABLE)
    return admitted


def give_back(
    flow: object,
    key: CanonicalKey,
    tool: str,
    limits: ToolLimits | None,
    admitted: Admitted | None,
) -> None:
    """Gives back what a limited call's admission took (a slot, or a place in line) when the
    call was not created. One the same call already held (a duplicate) belongs to the first
    call, and stays."""
    if limits is not None and isinstance(flow, Flow):
        withdraw(flow, key, tool, limits, admitted in (Admitted.GRANTED, Admitted.WAITING))


def withdraw(flow: Flow, key: CanonicalKey, tool: str, limits: ToolLimits, taken: bool) -> None:
    if not taken:
        return
    try:
        flow.release(key, tool, limits)
    except StoreError:
        # The reaper drops a slot or an admission whose record never came to exist.
        logger.warning("flow control: %s not withdrawn (store)", key.identity)


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
    run_id, call_id = ids = (envelope.run_id, envelope.tool_call_id)
    watch = seal_watch(terms, key_of(run_id, call_id) if run_id and call_id else None)
    if watch is None:
        submission = submit(terms, envelope, run, replay=replay)
        if submission.outcome is not None:
            return submission.outcome
        assert submission.key is not None
        # Just dispatched: wait first, then read. A replayed call may be sealed long ago.
        return await_outcome(terms, submission.key, give_up, read_first=submission.replayed)
    with watch:
        # Subscribed before the record exists: its seal cannot come before the
        # subscription, so no read is needed before the first wait.
        left = time_left(give_up)
        confirmed = watch.attach(wait_slice(terms, left))
        submission = submit(terms, envelope, run, replay=replay, watched=True)
        if submission.outcome is not None:
            return submission.outcome
        assert submission.key is not None
        if (submission.key.run_id, submission.key.tool_call_id) != ids:
            return await_outcome(terms, submission.key, give_up, read_first=submission.replayed)
        return await_seal(
            terms, submission.key, give_up, watch, read_first=submission.replayed or not confirmed
        )


def outcome(terms: CallTerms, run_id: str, tool_call_id: str, timeout: float | None) -> ToolOutcome:
    """``ToolBoundary.outcome``: RECORD_NOT_FOUND at once for ids no record has."""
    key = key_of(run_id, tool_call_id)
    if key is None:
        return ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
    return await_outcome(terms, key, give_up_at(timeout), read_first=True)


def observe(terms: CallTerms, run_id: str, projector_version: str | None = None) -> ObservedFacts:
    """``ToolBoundary.observe``: the run's READY calls as bounded observed facts (by
    projector version: ``boundary.reprojection.observe_version``)."""
    if projector_version is not None:
        return observe_version(
            terms.store, run_id, projector_version, terms.run_projector, now=terms.clock()
        )
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
