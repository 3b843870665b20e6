"""``ToolBoundary``'s asyncio calls: the same types and semantics as the sync ones, without
blocking the event loop.

Redis is reached through the store's asyncio side (``redis.asyncio``). A wait does not poll:
it watches the call's seal notification (``store/notify.py``), and the canonical record,
read after the watch is confirmed and after every wake-up, decides. A store without an
asyncio side (a Redis Cluster client) gets the sync calls run on threads instead.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from weakref import WeakKeyDictionary

from boundary import formats, telemetry
from boundary.admission import admission
from boundary.call_steps import (
    READ_GRACE_S,
    Prepared,
    dispatch_failed,
    give_up_at,
    key_of,
    outcome_from_message,
    prepare,
    refuse,
    settled,
    time_left,
    turned_away,
)
from boundary.dispatch import adispatch_call
from boundary.door import Door
from boundary.errors import ErrorCode, StoreError, StoreUnavailable, failure_name
from boundary.flow import Flow
from boundary.models import (
    CallProgress,
    CanonicalKey,
    CanonicalRecord,
    ObservedFacts,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.registry import ToolRegistry
from boundary.store.base import AsyncStore
from boundary.store.seal_message import SealMessage

logger = logging.getLogger(__name__)

#: Longest an async wait trusts the notification alone before it reads the record again,
#: seconds. A lost connection already wakes every waiter; this covers what sends no
#: message at all (a record that expires while waited on).
RECHECK_S = 10.0


class AsyncCalls:
    """The async calls of one boundary, and the store's asyncio side per event loop.

    Args:
        door: the boundary: its parts and settings, and its sync calls (run on threads
            when the store has no asyncio side, a Redis Cluster client say).
    """

    def __init__(self, door: Door) -> None:
        self.door = door
        #: The store's asyncio side per event loop (``None``: async calls use threads).
        self._stores: WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncStore | None] = (
            WeakKeyDictionary()
        )

    @property
    def registry(self) -> ToolRegistry:
        """The boundary's tools (what the submit span names)."""
        return self.door.registry

    def store(self) -> AsyncStore | None:
        """The store's asyncio side for the running loop, made on first use."""
        loop = asyncio.get_running_loop()
        if loop not in self._stores:
            self._stores[loop] = self.door.store.async_store()
        return self._stores[loop]

    @telemetry.traced_asubmit
    async def asubmit(
        self, envelope: ToolCallEnvelope, run: RunContext, *, replay: bool = False
    ) -> Submission:
        """``ToolBoundary.asubmit``."""
        store = self.store()
        if store is None or self._limited(envelope.tool_name):
            # A limited tool's flow control runs on the sync store, on a thread (its slot,
            # its place in line: two round trips at most).
            return await asyncio.to_thread(self.door.submit, envelope, run, replay=replay)
        # Many calls started at once: this loop iteration runs only its budget of first steps.
        await admission().turn()
        prepared = prepare(self.door, envelope, run)
        if isinstance(prepared, Submission):
            return prepared
        # Shielded: a caller cancelled between create and dispatch would leave a record that
        # no worker ever runs. The submission completes; only the caller stops waiting for it.
        return await asyncio.shield(self._create_and_dispatch(store, envelope, prepared, replay))

    async def _create_and_dispatch(
        self, store: AsyncStore, envelope: ToolCallEnvelope, prepared: Prepared, replay: bool
    ) -> Submission:
        key = prepared.key
        try:
            created = await store.create(key, **prepared.create)
        except StoreError:
            return turned_away(key, ErrorCode.STORE_UNAVAILABLE)
        refused = refuse(key, created, replay=replay)
        if refused is not None:
            return refused
        try:
            await self._dispatch(key, prepared.queue)
        except Exception as exc:
            # As in ``submit``: the call will never run; the exception's text is dropped.
            logger.warning(
                "dispatch of %s failed (%s); sealing DISPATCH_FAILED",
                key.identity,
                failure_name(exc),
            )
            return await _seal_dispatch_failed(store, key)
        return Submission(key=key, accepted=True)

    def _limited(self, tool: object) -> bool:
        """True for a tool whose calls go through flow control (from memory)."""
        flow = self.door.store.flow
        return isinstance(flow, Flow) and isinstance(tool, str) and flow.limits(tool) is not None

    async def progress(self, record: CanonicalRecord) -> CallProgress | None:
        """A PROJECTING call's progress: a limited tool's call that has not started says it
        waits for a slot (read on a thread), any other what its record says."""
        flow = self.door.store.flow
        if record.started_at is None and self._limited(record.tool_name):
            assert isinstance(flow, Flow)
            return await asyncio.to_thread(flow.progress, record)
        return CallProgress.of(record)

    async def _dispatch(self, key: CanonicalKey, queue: str) -> None:
        """The dispatcher's own ``adispatch`` when it has one, else ``adispatch_call`` (its
        ``asend_attempt``, or its blocking dispatch on a thread)."""
        dispatcher = self.door.dispatcher
        adispatch = getattr(dispatcher, "adispatch", None)
        if adispatch is not None:
            await adispatch(key)
        else:
            await adispatch_call(dispatcher, key, queue)

    async def ainvoke(
        self,
        envelope: ToolCallEnvelope,
        run: RunContext,
        timeout: float | None = None,
        *,
        replay: bool = False,
    ) -> ToolOutcome:
        """``ToolBoundary.ainvoke``."""
        give_up = give_up_at(timeout)
        store = self.store()
        if store is None:
            return await asyncio.to_thread(self.door.invoke, envelope, run, timeout, replay=replay)
        submission = await self.asubmit(envelope, run, replay=replay)
        if submission.outcome is not None:
            return submission.outcome
        assert submission.key is not None
        # Dispatches end in batches (one wake-up per publishing batch): waits start in turn.
        await admission().turn()
        return await await_outcome(store, submission.key, give_up, self.progress)

    async def asubmit_many(
        self, envelopes: Sequence[ToolCallEnvelope], run: RunContext
    ) -> list[Submission]:
        """``ToolBoundary.asubmit_many``: the turn's one create script and one publish on a
        thread, shielded (a turn recorded is always sent, whatever happens to the caller)."""
        return await asyncio.shield(asyncio.to_thread(self.door.submit_many, envelopes, run))

    async def ainvoke_many(
        self,
        envelopes: Sequence[ToolCallEnvelope],
        run: RunContext,
        timeout: float | None = None,
    ) -> list[ToolOutcome]:
        """``ToolBoundary.ainvoke_many``: the accepted calls' waits share the run's one
        channel subscription (the store's notifier subscribes each channel once)."""
        give_up = give_up_at(timeout)
        store = self.store()
        if store is None:
            return await asyncio.to_thread(self.door.invoke_many, envelopes, run, timeout)
        submissions = await self.asubmit_many(envelopes, run)

        async def one(submission: Submission) -> ToolOutcome:
            if submission.outcome is not None:
                return submission.outcome
            assert submission.key is not None
            return await await_outcome(store, submission.key, give_up, self.progress)

        return list(await asyncio.gather(*(one(submission) for submission in submissions)))

    async def aoutcome(
        self, run_id: str, tool_call_id: str, timeout: float | None = None
    ) -> ToolOutcome:
        """``ToolBoundary.aoutcome``."""
        give_up = give_up_at(timeout)
        key = key_of(run_id, tool_call_id)
        if key is None:
            return ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
        store = self.store()
        if store is None:
            return await asyncio.to_thread(self.door.outcome, run_id, tool_call_id, timeout)
        return await await_outcome(store, key, give_up, self.progress)

    async def aobserve(
        self, run: RunContext | str, projector_version: str | None = None
    ) -> ObservedFacts:
        """``ToolBoundary.aobserve``."""
        run_id = run if isinstance(run, str) else run.run_id
        store = self.store()
        if store is None or projector_version is not None:
            # Side projections are read by the sync store's pipeline, on a thread.
            return await asyncio.to_thread(
                functools.partial(self.door.observe, run_id, projector_version=projector_version)
            )
        entries = await store.progress(run_id)
        return self.door.run_projector.project(run_id, entries, now=self.door.clock())

    async def aclose(self) -> None:
        """``ToolBoundary.aclose``: closes the running loop's asyncio store, if made."""
        store = self._stores.pop(asyncio.get_running_loop(), None)
        if store is not None:
            await store.aclose()


async def _seal_dispatch_failed(store: AsyncStore, key: CanonicalKey) -> Submission:
    try:
        await store.seal_error(key, ErrorCode.DISPATCH_FAILED)
        record = await store.get(key)
    except StoreError:
        record = None
    return dispatch_failed(key, record)


async def await_outcome(
    store: AsyncStore,
    key: CanonicalKey,
    give_up: float | None,
    progress: Callable[[CanonicalRecord], Awaitable[CallProgress | None]] | None = None,
) -> ToolOutcome:
    """Watches the call's seal, then reads the record; reads it again on every wake-up
    until it is sealed or ``give_up`` (monotonic) passes. The last read comes after the
    last wait, so a wait that runs out returns the call's real state (its progress from
    ``progress``, else from the record)."""
    try:
        async with store.watch(key) as watch:
            # Subscribed before the first read: a seal is seen by the read or by the watch.
            await _bounded_attach(store, watch, time_left(give_up))
            while True:
                _honour_cancel()
                record = await _bounded_get(store, key, time_left(give_up))
                _honour_cancel()
                done = settled(key, record)
                if done is not None:
                    return done
                assert record is not None
                left = time_left(give_up)
                if left is not None and left <= 0:
                    now = CallProgress.of(record) if progress is None else await progress(record)
                    return ToolOutcome.running(key.tool_call_id, now)
                if await watch.wait(RECHECK_S if left is None else min(left, RECHECK_S)):
                    # Woken by the call's seal message: it carries the outcome (no read).
                    done = outcome_from_message(_sealed(watch), record)
                    if done is not None:
                        return done
                # Seals come in bursts (one read of the notifier wakes every sealed call).
                await admission().turn()
    except StoreError as exc:
        return ToolOutcome.error(key.tool_call_id, formats.failure_code(exc))


def _sealed(watch: Any) -> SealMessage | None:
    """The watch's seal message (a store's watch without messages: ``None``, read)."""
    sealed = getattr(watch, "sealed", None)
    return None if sealed is None else sealed()


async def _bounded_attach(store: AsyncStore, watch: Any, left: float | None) -> None:
    """``watch.attach(left)``; when the store's seal notifier has no connection yet (its
    opening may wait on a silent Redis for the connect timeout), given up ``READ_GRACE_S``
    past ``left``. Raises ``StoreError`` (``StoreUnavailable`` when given up)."""
    notifier = getattr(store, "notifier", None)
    if left is None or getattr(notifier, "connected", True):
        await watch.attach(left)
        return
    try:
        await asyncio.wait_for(watch.attach(left), max(left, 0.0) + READ_GRACE_S)
    except TimeoutError:
        raise StoreUnavailable() from None


async def _bounded_get(
    store: AsyncStore, key: CanonicalKey, left: float | None
) -> CanonicalRecord | None:
    """``store.get``, given up ``READ_GRACE_S`` past the wait's timeout when the store's own
    socket timeout would let it wait longer (a silent, paused Redis): a wait ends by its
    timeout plus that grace. Raises ``StoreError`` (``StoreUnavailable`` when given up)."""
    if left is None:
        return await store.get(key)
    bound = max(left, 0.0) + READ_GRACE_S
    socket_s = getattr(store, "read_timeout_s", None)
    if isinstance(socket_s, int | float) and socket_s <= bound:
        return await store.get(key)
    try:
        return await asyncio.wait_for(store.get(key), bound)
    except TimeoutError:
        raise StoreUnavailable() from None


def _honour_cancel() -> None:
    """Raises CancelledError when this task was asked to stop. On Python 3.11 a cancel that
    lands while ``asyncio.wait_for`` (inside redis-py's send) completes is swallowed; without
    this check such a wait would go on to its timeout."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
