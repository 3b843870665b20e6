"""``ToolBoundary``'s blocking calls: submit, wait, invoke, observe, cancel.

The steps both paths share are in ``call_steps``; this module adds the I/O between them,
on the sync store and the dispatcher. It never imports the async path or ``core``.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from boundary import formats, telemetry
from boundary.call_steps import (
    READ_GRACE_S,
    Prepared,
    dispatch_failed,
    give_up_at,
    key_of,
    outcome_from_message,
    outcome_from_record,
    prepare,
    refuse,
    rejected,
    settled,
    time_left,
)
from boundary.dispatch import Revoker, dispatch_call
from boundary.door import CallTerms
from boundary.errors import ErrorCode, StoreError, StoreUnavailable
from boundary.flow import Flow
from boundary.models import (
    CallProgress,
    CanonicalKey,
    CanonicalRecord,
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
from boundary.store.seal_wait import SyncSealWatch

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

    When the run's seal channel is subscribed already in this process (a call of the run
    waited on a moment ago), the new record is covered on it (``SyncSealWatch.cover``): a
    later ``outcome`` needs no read first. ``watched``: the caller (``invoke``) watches the
    call itself."""
    prepared = prepare(terms, envelope, run)
    if isinstance(prepared, Submission):
        return prepared
    key = prepared.key
    flow = terms.store.flow
    if isinstance(flow, Flow):
        limits = flow.limits(prepared.create["tool_name"])
        if limits is not None:
            return _submit_limited(terms, flow, limits, prepared, envelope, run=run, replay=replay)
    watch = None if watched else seal_watch(terms, key)
    ticket = None if watch is None else watch.ticket()
    try:
        created = terms.store.create(key, **prepared.create)
    except StoreError:
        return rejected(envelope, key, ErrorCode.STORE_UNAVAILABLE)
    refused = refuse(envelope, key, created, replay=replay)
    if refused is not None:
        return refused
    if ticket is not None:
        assert watch is not None
        watch.cover(ticket)
    try:
        dispatch_call(terms.dispatcher, key, prepared.queue)
    except Exception:
        # Broker down, or anything else: the call will never run, so it must not stay
        # PROJECTING. The exception's text is dropped (it may hold a broker URL).
        logger.warning("dispatch of %s failed; sealing DISPATCH_FAILED", key.identity)
        return seal_dispatch_failed(terms, key)
    return Submission(key=key, accepted=True)


def _submit_limited(
    terms: CallTerms,
    flow: Flow,
    limits: ToolLimits,
    prepared: Prepared,
    envelope: ToolCallEnvelope,
    *,
    run: RunContext,
    replay: bool,
) -> Submission:
    """``submit`` of a tool under flow control: a slot (or a place in line) is asked for
    before the record is created, so a call refused for a full line (TOOL_BUSY) leaves
    nothing created or charged; one round trip more than an unlimited call when a slot is
    free, two when the call must wait (it joins the line once its record exists)."""
    key, tool = prepared.key, prepared.create["tool_name"]
    admitted = admit(terms, flow, limits, prepared, envelope, run=run)
    if isinstance(admitted, Submission):
        return admitted
    # Only a ticket taken here is given back when the call is not created: one the same
    # call already held (a duplicate) belongs to the first call.
    taken = admitted in (Admitted.GRANTED, Admitted.WAITING)
    try:
        created = terms.store.create(key, **prepared.create)
    except StoreError:
        withdraw(flow, key, tool, limits, taken)
        return rejected(envelope, key, ErrorCode.STORE_UNAVAILABLE)
    refused = refuse(envelope, key, created, replay=replay)
    if refused is not None:
        withdraw(flow, key, tool, limits, taken)
        return refused
    if admitted in (Admitted.GRANTED, Admitted.HOLDS):
        try:
            dispatch_call(terms.dispatcher, key, prepared.queue)
        except Exception:
            logger.warning("dispatch of %s failed; sealing DISPATCH_FAILED", key.identity)
            return seal_dispatch_failed(terms, key)  # the seal gives the slot up
        return Submission(key=key, accepted=True)
    try:
        # In line now; sent at once if a slot is free meanwhile (among the reply's grants).
        flow.confirm(key, tool, limits)
    except StoreError:
        # Accepted all the same: the reaper puts a call admitted and never put in line in it.
        logger.warning("flow control: %s not put in line (store); the reaper will", key.identity)
    return Submission(key=key, accepted=True)


def admit(
    terms: CallTerms,
    flow: Flow,
    limits: ToolLimits,
    prepared: Prepared,
    envelope: ToolCallEnvelope,
    *,
    run: RunContext,
) -> Admitted | Submission:
    """A limited call's admission, asked for before its record exists: what it said, or the
    call refused (TOOL_BUSY: its line is full and the call is new; STORE_UNAVAILABLE)."""
    key = prepared.key
    try:
        admitted = flow.admit(key, prepared.create["tool_name"], limits, run).admitted
        if admitted is Admitted.BUSY and terms.store.get(key, with_raw=False) is None:
            return rejected(envelope, key, ErrorCode.TOOL_BUSY)
    except StoreError:
        return rejected(envelope, key, ErrorCode.STORE_UNAVAILABLE)
    return admitted


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


def seal_watch(terms: CallTerms, key: CanonicalKey | None) -> SyncSealWatch | None:
    """A watch on the call's seal when the dispatcher's wait would watch it anyway (its
    ``waits_on_seal``) and the store can (``watch_seal``); else ``None``."""
    watch_seal = getattr(terms.store, "watch_seal", None)
    if key is None or watch_seal is None or not getattr(terms.dispatcher, "waits_on_seal", False):
        return None
    watch: SyncSealWatch | None = watch_seal(key)
    return watch


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
    watch = seal_watch(terms, key)
    if watch is not None:
        # The dispatcher's own wait would watch the record's seal: watch it here and save
        # the reads around that wait.
        with watch:
            if watch.join_covered():
                # Created while the run's channel was subscribed here: no seal of it can
                # have been missed (one that came is held), so no read before the wait.
                return await_seal(terms, key, give_up, watch, read_first=False)
            if watch.join_subscribed():
                # The run's channel is subscribed already (no round trip): read after it.
                return await_seal(terms, key, give_up, watch, read_first=True)
            if read_first:
                # Read before subscribing: a call sealed already costs no subscription.
                state = _read(terms, key, give_up)
                if isinstance(state, ToolOutcome):
                    return state
            left = time_left(give_up)
            watch.attach(wait_slice(terms, left))
            return await_seal(terms, key, give_up, watch, read_first=True)
    # Set once the dispatcher's wait is of no use: only the record is polled from then on.
    poll_only = False
    read = read_first
    while True:
        if read:
            state = _read(terms, key, give_up)
            if isinstance(state, ToolOutcome):
                return state
            record = state
        left = time_left(give_up)
        if left is not None and left <= 0:
            if read:
                return ToolOutcome.running(key.tool_call_id, progress_of(terms, record))
            # Out of time before the first read (invoke's submit used it all): read once.
            read = True
            continue
        read = True
        slice_s = wait_slice(terms, left)
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


def progress_of(terms: CallTerms, record: CanonicalRecord) -> CallProgress | None:
    """A PROJECTING call's progress: its tool's, or (a limited tool's call that has not
    started) that it waits for a slot, with the calls ahead of it."""
    flow = terms.store.flow
    if isinstance(flow, Flow):
        return flow.progress(record)
    return CallProgress.of(record)


def wait_slice(terms: CallTerms, left: float | None) -> float:
    """One wait's length: ``poll_s``, or less when less time is ``left``."""
    return terms.poll_s if left is None else min(left, terms.poll_s)


#: Threads that make the reads a wait bounds by its timeout (``_bounded_get``).
_bounded_reads: tuple[int, ThreadPoolExecutor] | None = None


def _reader() -> ThreadPoolExecutor:
    """This process's threads for bounded reads (made on first use: a forked child, a
    prefork worker's, gets its own, never its parent's dead ones)."""
    global _bounded_reads
    made = _bounded_reads
    if made is None or made[0] != os.getpid():
        made = (os.getpid(), ThreadPoolExecutor(max_workers=8, thread_name_prefix="tb-read"))
        _bounded_reads = made
    return made[1]


def _read(
    terms: CallTerms, key: CanonicalKey, give_up: float | None = None
) -> ToolOutcome | CanonicalRecord:
    """The call's outcome when its record decides it (sealed, missing, or the store
    unreachable); else its PROJECTING record. A wait's read ends by its ``give_up`` time
    plus ``READ_GRACE_S`` (``STORE_UNAVAILABLE`` when the store is silent that long)."""
    try:
        record = _bounded_get(terms, key, give_up)
    except StoreError as exc:
        return ToolOutcome.error(key.tool_call_id, formats.failure_code(exc))
    done = settled(key, record)
    if done is not None:
        return done
    assert record is not None
    return record


def _bounded_get(
    terms: CallTerms, key: CanonicalKey, give_up: float | None
) -> CanonicalRecord | None:
    """``store.get`` (no raw response), given up past ``give_up`` + ``READ_GRACE_S`` when the
    store's own socket timeout would let it wait longer (a silent, paused Redis): made on a
    thread of ``_reader()`` then, directly otherwise (no hand-off while time is ample).
    Raises ``StoreError`` (``StoreUnavailable`` when given up)."""
    left = time_left(give_up)
    if left is None:
        return terms.store.get(key, with_raw=False)
    bound = max(left, 0.0) + READ_GRACE_S
    socket_s = getattr(terms.store, "read_timeout_s", None)
    if isinstance(socket_s, int | float) and socket_s <= bound:
        return terms.store.get(key, with_raw=False)
    read = _reader().submit(terms.store.get, key, with_raw=False)
    try:
        return read.result(timeout=bound)
    except FutureTimeout:
        read.cancel()
        raise StoreUnavailable() from None


def await_seal(
    terms: CallTerms,
    key: CanonicalKey,
    give_up: float | None,
    watch: SyncSealWatch,
    *,
    read_first: bool,
) -> ToolOutcome:
    """Waits on the record's seal notification until the monotonic time ``give_up``, with
    ``watch`` attached (subscribed, confirmed): reads the record (unless ``read_first`` is
    false: the subscription was confirmed before the record existed), then waits for a
    message naming the call: its seal message carries the outcome (``outcome_from_message``:
    no read); any other wake-up reads the record again, as does every ``poll_s`` without one
    (a missed wake-up costs one slice, never a hang). The last read comes after the time
    is up, so a wait that runs out returns the real state."""
    read = read_first
    record: CanonicalRecord | None = None
    while True:
        if read:
            state = _read(terms, key, give_up)
            if isinstance(state, ToolOutcome):
                return state
            record = state
        left = time_left(give_up)
        if left is not None and left <= 0:
            if read:
                assert record is not None
                return ToolOutcome.running(key.tool_call_id, progress_of(terms, record))
            read = True  # out of time before the first read: read once
            continue
        read = True
        if watch.wait(wait_slice(terms, left)):
            # Woken by the call's seal message: it carries the bounded outcome (no read).
            done = outcome_from_message(watch.sealed(), record)
            if done is not None:
                return done


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
