"""``ToolBoundary``: the one door every tool call of an agent passes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from weakref import WeakKeyDictionary

from pydantic import ValidationError

from boundary import telemetry
from boundary.aio_calls import AsyncCalls
from boundary.dispatch import Dispatcher, Revoker, dispatch_call
from boundary.errors import ErrorCode, StoreError
from boundary.handle import DEFAULT_CALL_TIMEOUT_S, RunBoundary
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
from boundary.preflight import Rejected, preflight
from boundary.progress import RunProgressProjector
from boundary.registry import ToolRegistry
from boundary.steps import outcome_from_record
from boundary.store.base import (
    AsyncStore,
    CanonicalStore,
    CreateResult,
    CreateStatus,
    CreateTerms,
    OpenRunStatus,
    WriteStatus,
)

logger = logging.getLogger(__name__)

#: How long a call may stay PROJECTING (queue wait included) before the reaper may seal it,
#: in seconds, when its run's deadline is later or absent.
DEFAULT_MAX_PENDING_S = 3600.0
#: Extra time past a call's deadline before the reaper seals it WORKER_LOST, in seconds.
DEFAULT_REAP_GRACE_S = 60.0
#: Longest single wait on the dispatcher before ``outcome`` reads the record again, seconds.
DEFAULT_POLL_S = 1.0


def _give_up(timeout: float | None) -> float | None:
    """The monotonic time a wait of ``timeout`` seconds ends (``None``: never)."""
    return None if timeout is None else time.monotonic() + max(timeout, 0.0)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call that passed preflight: its key and the arguments of ``store.create``."""

    key: CanonicalKey
    create: CreateTerms
    #: The queue of the tool's execute step (``ToolSpec.queue``).
    queue: str


class ToolBoundary(AsyncCalls):
    """Preflight, create, dispatch, wait, observe.

    Args:
        store: where each call's canonical record lives.
        registry: the tools that may be called.
        dispatcher: how accepted calls reach execution, and their outcomes come back.
        run_projector: turns a run's progress into observed facts; defaults to the store's
            limits.
        max_pending_s: how long a call may stay PROJECTING when its run's deadline is later
            or absent.
        reap_grace_s: grace past a call's deadline before the reaper may seal it.
        poll_s: longest wait on the dispatcher before the record is read again.
        clock: epoch seconds; injectable for tests.
    """

    def __init__(
        self,
        *,
        store: CanonicalStore,
        registry: ToolRegistry,
        dispatcher: Dispatcher,
        run_projector: RunProgressProjector | None = None,
        max_pending_s: float = DEFAULT_MAX_PENDING_S,
        reap_grace_s: float = DEFAULT_REAP_GRACE_S,
        poll_s: float = DEFAULT_POLL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.dispatcher = dispatcher
        self.run_projector = run_projector or RunProgressProjector(
            max_facts=store.limits.max_facts, max_facts_bytes=store.limits.max_facts_bytes
        )
        self.max_pending_s = max_pending_s
        self.reap_grace_s = reap_grace_s
        self.poll_s = poll_s
        self._clock = clock
        #: The store's asyncio side per event loop (``None``: async calls use threads).
        self._async_stores: WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncStore | None] = (
            WeakKeyDictionary()
        )

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), tz=UTC)

    @telemetry.traced_submit
    def submit(
        self, envelope: ToolCallEnvelope, run: RunContext, *, replay: bool = False
    ) -> Submission:
        """Preflight, create the PROJECTING record, dispatch. Never raises for bad input.

        ``replay=True`` (an agent resumed from a checkpoint makes its last calls again): when
        the same call (same tool, equal arguments) is already recorded under this id, the
        answer is an accepted ``Submission`` for that key with ``replayed`` true, instead of
        ``DUPLICATE_TOOL_CALL``; nothing is created, dispatched or charged to a budget, and
        ``outcome()`` gives the first call's outcome. Another call under the id is still
        refused with ``DUPLICATE_TOOL_CALL_CONFLICT``.
        """
        prepared = self._prepare(envelope, run)
        if isinstance(prepared, Submission):
            return prepared
        key = prepared.key
        try:
            created = self.store.create(key, **prepared.create)
        except StoreError:
            return self._rejected(envelope, key, ErrorCode.STORE_UNAVAILABLE)
        refused = self._refused(envelope, key, created, replay=replay)
        if refused is not None:
            return refused
        try:
            dispatch_call(self.dispatcher, key, prepared.queue)
        except Exception:
            # Broker down, or anything else: the call will never run, so it must not stay
            # PROJECTING. The exception's text is dropped (it may hold a broker URL).
            logger.warning("dispatch of %s failed; sealing DISPATCH_FAILED", key.identity)
            return self._dispatch_failed(key)
        return Submission(key=key, accepted=True)

    def _prepare(self, envelope: ToolCallEnvelope, run: RunContext) -> Submission | Prepared:
        """Preflight (pure, no I/O): the rejection, or what ``create`` needs."""
        now = self._now()
        checked = preflight(envelope, run, self.registry, self.store.limits, now)
        if isinstance(checked, Rejected):
            return self._rejected(envelope, None, checked.code, path=checked.path)
        deadline = run.deadline
        return Prepared(
            key=checked.key,
            create={
                "tool_name": checked.spec.name,
                "request": checked.request,
                "deadline": deadline,
                # The reaper may seal the call WORKER_LOST once it is PROJECTING past its
                # run's deadline or ``max_pending_s``, whichever comes first, plus the grace:
                # durations, counted by the store from its own clock (Redis TIME), so this
                # process's clock being off moves no reap time.
                "max_pending_s": self.max_pending_s,
                "reap_grace_s": self.reap_grace_s,
                "max_run_calls": run.max_tool_calls,
                "max_tool_calls": run.max_calls_per_tool.get(checked.spec.name),
            },
            queue=checked.spec.queue,
        )

    def _refused(
        self,
        envelope: ToolCallEnvelope,
        key: CanonicalKey,
        created: CreateResult,
        *,
        replay: bool = False,
    ) -> Submission | None:
        """``None`` when the call was created; else what ``submit`` answers (a replay of the
        same call is an accepted submission of the existing key)."""
        if created.status is CreateStatus.CREATED:
            return None
        if replay and created.status is CreateStatus.DUPLICATE:
            return Submission(key=key, accepted=True, replayed=True)
        code = created.status.error_code
        assert code is not None
        return self._rejected(envelope, key, code)

    def _rejected(
        self,
        envelope: ToolCallEnvelope,
        key: CanonicalKey | None,
        code: ErrorCode,
        *,
        path: str | None = None,
    ) -> Submission:
        call_id = envelope.tool_call_id if is_safe_id(envelope.tool_call_id) else None
        outcome = ToolOutcome.error(call_id, code, path=path)
        return Submission(key=key, accepted=False, outcome=outcome)

    def _dispatch_failed(self, key: CanonicalKey) -> Submission:
        try:
            self.store.seal_error(key, ErrorCode.DISPATCH_FAILED)
            record = self.store.get(key, with_raw=False)
        except StoreError:
            record = None
        # If something sealed it first (an in-process step that ran before failing), the
        # record decides; else the call ended DISPATCH_FAILED.
        outcome = (record and outcome_from_record(record)) or ToolOutcome.error(
            key.tool_call_id, ErrorCode.DISPATCH_FAILED
        )
        return Submission(key=key, accepted=False, outcome=outcome)

    def outcome(self, run_id: str, tool_call_id: str, timeout: float | None = None) -> ToolOutcome:
        """The outcome of an accepted call, waiting up to ``timeout`` seconds (``None``: no
        limit) for it to be sealed.

        Returns RECORD_NOT_FOUND at once for an unknown or expired call. Never raises for
        time: a wait that runs out returns the call's real state, a PROJECTING outcome
        (``pending`` true) while it still runs; ask again later with the same ids.
        """
        try:
            key = CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)
        except ValidationError:
            return ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
        return self._await(key, _give_up(timeout), read_first=True)

    def _await(self, key: CanonicalKey, give_up: float | None, *, read_first: bool) -> ToolOutcome:
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
                    record = self.store.get(key, with_raw=False)
                except StoreError:
                    return ToolOutcome.error(key.tool_call_id, ErrorCode.STORE_UNAVAILABLE)
                if record is None:
                    return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
                done = outcome_from_record(record)
                if done is not None:
                    return done
            left = None if give_up is None else give_up - time.monotonic()
            if left is not None and left <= 0:
                if read:
                    return ToolOutcome.running(key.tool_call_id, CallProgress.of(record))
                # Out of time before the first read (invoke's submit used it all): read once.
                read = True
                continue
            read = True
            slice_s = self.poll_s if left is None else min(left, self.poll_s)
            if poll_only:
                time.sleep(slice_s)
                continue  # back to reading the record
            started = time.monotonic()
            if self.dispatcher.wait(key, slice_s) is not None:
                # Woken by a result: read the record once more; if it is still PROJECTING,
                # that result was stale and only the record is polled from now on.
                poll_only = True
            elif time.monotonic() - started < slice_s / 2:
                # The dispatcher cannot wait (it knows nothing of this call): poll the record
                # every slice rather than spin on it.
                poll_only = True

    def invoke(
        self,
        envelope: ToolCallEnvelope,
        run: RunContext,
        timeout: float | None = None,
        *,
        replay: bool = False,
    ) -> ToolOutcome:
        """``submit`` then wait for the outcome, ``timeout`` bounding the whole call. Always
        returns an outcome: a PROJECTING one (``pending``) when the time ran out first.

        ``replay=True``: the same call already made under this id returns the first call's
        outcome (waiting for it within ``timeout`` while it runs) instead of
        ``DUPLICATE_TOOL_CALL``; the tool is not run again (see ``submit``)."""
        give_up = _give_up(timeout)
        submission = self.submit(envelope, run, replay=replay)
        if submission.outcome is not None:
            return submission.outcome
        assert submission.key is not None
        # Just dispatched: wait first, then read. A replayed call may be sealed long ago.
        return self._await(submission.key, give_up, read_first=submission.replayed)

    def for_run(self, run: RunContext, *, timeout: float = DEFAULT_CALL_TIMEOUT_S) -> RunBoundary:
        """A handle on ``run``: ``for_run(run).call(tool_call_id, tool_name, arguments)``
        needs no envelope and no repeated run id. ``timeout`` is its calls' default wait."""
        return RunBoundary(self, run, timeout=timeout)

    def observe(self, run: RunContext | str) -> ObservedFacts:
        """The run's READY calls as bounded observed facts, in acceptance order.

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        run_id = run if isinstance(run, str) else run.run_id
        if not is_safe_id(run_id):
            # No record is ever created under an unsafe id (preflight refuses it), and such
            # an id (a lone surrogate, say) cannot even be encoded for Redis: nothing to see.
            return self.run_projector.project(run_id, [], now=self._clock())
        entries = self.store.progress(run_id)
        return self.run_projector.project(run_id, entries, now=self._clock())

    # --- Runs kept on the server, and cancellation -------------------------------------------

    def open_run(self, run: RunContext) -> OpenRunStatus:
        """Keeps the run's policy in Redis (TTL = the record TTL) so servers, such as the MCP
        server, look the run up by id and a request cannot bring its own policy.

        An open run's policy is never replaced and a closed run never reopens: the status says
        which happened (``.is_open`` is true when the run is open with exactly this policy).

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        return self.store.open_run(run)

    def get_run(self, run_id: str) -> RunContext | None:
        """The open run's policy; ``None`` when unknown, closed or expired (the caller answers
        ``RUN_NOT_FOUND`` and runs nothing).

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        return self.store.get_run(run_id)

    def close_run(self, run_id: str) -> bool:
        """Closes the run for good: ``get_run`` answers ``None`` from now on, and every call of
        the run still PROJECTING is cancelled (sealed ``CANCELLED``, its queued work revoked),
        so no tool of a closed run runs on. ``False`` when it was not open.

        The calls are cancelled whether or not the run was open: a close that stopped after
        its first step (a crashed server) is finished by the next one.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        closed = self.store.close_run(run_id)
        if is_safe_id(run_id):
            for entry in self.store.progress(run_id):
                record = entry.record
                if record is not None and record.status is InvocationStatus.PROJECTING:
                    self.cancel(run_id, record.tool_call_id)
        return closed

    def cancel(self, run_id: str, tool_call_id: str) -> ToolOutcome:
        """Ends a PROJECTING call: one Lua script seals it ERROR ``CANCELLED`` only if it is
        still PROJECTING, so the tool's later return (or anything else) cannot change it; then
        the dispatcher revokes the call's queued work, if it can.

        Returns the call's outcome as its record now says: ``CANCELLED``, or the outcome it had
        already reached (a finished call stays finished); ``RECORD_NOT_FOUND`` for an unknown
        or expired call. Never raises for bad input.
        """
        try:
            key = CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)
        except ValidationError:
            return ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
        try:
            written = self.store.seal_error(key, ErrorCode.CANCELLED)
            if written is WriteStatus.OK:
                self._revoke(key)
                return ToolOutcome.error(key.tool_call_id, ErrorCode.CANCELLED)
            record = None if written is WriteStatus.MISSING else self.store.get(key, with_raw=False)
        except StoreError:
            return ToolOutcome.error(key.tool_call_id, ErrorCode.STORE_UNAVAILABLE)
        if record is None:
            return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
        return outcome_from_record(record) or ToolOutcome.error(
            key.tool_call_id, ErrorCode.STORE_UNAVAILABLE
        )

    def _revoke(self, key: CanonicalKey) -> None:
        """Best effort: the record is sealed already, so work that still runs changes nothing."""
        if not isinstance(self.dispatcher, Revoker):
            return
        try:
            self.dispatcher.revoke(key)
        except Exception:
            # The text may name a broker URL: only that it failed is logged.
            logger.warning("revoke of cancelled call %s failed", key.identity)

    def _async_store(self) -> AsyncStore | None:
        """The store's asyncio side for the running loop, made on first use."""
        loop = asyncio.get_running_loop()
        if loop not in self._async_stores:
            self._async_stores[loop] = self.store.async_store()
        return self._async_stores[loop]
