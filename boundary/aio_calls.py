"""``ToolBoundary``'s asyncio calls: the same types and semantics as the sync ones, without
blocking the event loop.

Redis is reached through the store's asyncio side (``redis.asyncio``). A wait does not poll:
it watches the call's seal notification (``store/notify.py``), and the canonical record,
read after the watch is confirmed and after every wake-up, decides. A store without an
asyncio side (a Redis Cluster client) gets the sync calls run on threads instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, cast

from pydantic import ValidationError

from boundary import telemetry
from boundary.dispatch import dispatch_call
from boundary.errors import ErrorCode, StoreError
from boundary.models import (
    CallProgress,
    CanonicalKey,
    ObservedFacts,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.steps import outcome_from_record
from boundary.store.base import AsyncStore

if TYPE_CHECKING:
    from boundary.core import Prepared, ToolBoundary

logger = logging.getLogger(__name__)

#: Longest an async wait trusts the notification alone before it reads the record again,
#: seconds. A lost connection already wakes every waiter; this covers what sends no
#: message at all (a record that expires while waited on).
RECHECK_S = 10.0


def _give_up(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + max(timeout, 0.0)


def _left(give_up: float | None) -> float | None:
    return None if give_up is None else max(give_up - time.monotonic(), 0.0)


async def _dispatch(boundary: ToolBoundary, key: CanonicalKey, queue: str) -> None:
    """The dispatcher's own ``adispatch`` when it has one, else its dispatch on a thread
    (a Celery publish is blocking network I/O)."""
    adispatch = getattr(boundary.dispatcher, "adispatch", None)
    if adispatch is not None:
        await adispatch(key)
    else:
        await asyncio.to_thread(dispatch_call, boundary.dispatcher, key, queue)


@telemetry.traced_asubmit
async def asubmit(
    boundary: ToolBoundary, envelope: ToolCallEnvelope, run: RunContext, replay: bool = False
) -> Submission:
    store = boundary._async_store()
    if store is None:
        return await asyncio.to_thread(boundary.submit, envelope, run, replay=replay)
    prepared = boundary._prepare(envelope, run)
    if isinstance(prepared, Submission):
        return prepared
    # Shielded: a caller cancelled between create and dispatch would leave a record that no
    # worker ever runs. The submission completes; only the caller stops waiting for it.
    return await asyncio.shield(
        _create_and_dispatch(boundary, store, envelope, prepared, replay=replay)
    )


async def _create_and_dispatch(
    boundary: ToolBoundary,
    store: AsyncStore,
    envelope: ToolCallEnvelope,
    prepared: Prepared,
    *,
    replay: bool,
) -> Submission:
    key = prepared.key
    try:
        created = await store.create(key, **prepared.create)
    except StoreError:
        return boundary._rejected(envelope, key, ErrorCode.STORE_UNAVAILABLE)
    refused = boundary._refused(envelope, key, created, replay=replay)
    if refused is not None:
        return refused
    try:
        await _dispatch(boundary, key, prepared.queue)
    except Exception:
        # As in ``submit``: the call will never run; the exception's text is dropped.
        logger.warning("dispatch of %s failed; sealing DISPATCH_FAILED", key.identity)
        return await _dispatch_failed(store, key)
    return Submission(key=key, accepted=True)


async def _dispatch_failed(store: AsyncStore, key: CanonicalKey) -> Submission:
    try:
        await store.seal_error(key, ErrorCode.DISPATCH_FAILED)
        record = await store.get(key)
    except StoreError:
        record = None
    outcome = (record and outcome_from_record(record)) or ToolOutcome.error(
        key.tool_call_id, ErrorCode.DISPATCH_FAILED
    )
    return Submission(key=key, accepted=False, outcome=outcome)


async def ainvoke(
    boundary: ToolBoundary,
    envelope: ToolCallEnvelope,
    run: RunContext,
    timeout: float | None,
    replay: bool = False,
) -> ToolOutcome:
    give_up = _give_up(timeout)
    store = boundary._async_store()
    if store is None:
        return await asyncio.to_thread(boundary.invoke, envelope, run, timeout, replay=replay)
    submission = await asubmit(boundary, envelope, run, replay)
    if submission.outcome is not None:
        return submission.outcome
    assert submission.key is not None
    return await _await(store, submission.key, give_up)


async def aoutcome(
    boundary: ToolBoundary, run_id: str, tool_call_id: str, timeout: float | None
) -> ToolOutcome:
    give_up = _give_up(timeout)
    try:
        key = CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)
    except ValidationError:
        return ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
    store = boundary._async_store()
    if store is None:
        return await asyncio.to_thread(boundary.outcome, run_id, tool_call_id, timeout)
    return await _await(store, key, give_up)


async def _await(store: AsyncStore, key: CanonicalKey, give_up: float | None) -> ToolOutcome:
    """Watches the call's seal, then reads the record; reads it again on every wake-up
    until it is sealed or ``give_up`` (monotonic) passes. The last read comes after the
    last wait, so a wait that runs out returns the call's real state."""
    try:
        async with store.watch(key) as watch:
            # Subscribed before the first read: a seal is seen by the read or by the watch.
            await watch.attach(_left(give_up))
            while True:
                _honour_cancel()
                record = await store.get(key)
                _honour_cancel()
                if record is None:
                    return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
                done = outcome_from_record(record)
                if done is not None:
                    return done
                left = _left(give_up)
                if left is not None and left <= 0:
                    return ToolOutcome.running(key.tool_call_id, CallProgress.of(record))
                await watch.wait(RECHECK_S if left is None else min(left, RECHECK_S))
    except StoreError:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.STORE_UNAVAILABLE)


def _honour_cancel() -> None:
    """Raises CancelledError when this task was asked to stop. On Python 3.11 a cancel that
    lands while ``asyncio.wait_for`` (inside redis-py's send) completes is swallowed; without
    this check such a wait would go on to its timeout."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def aobserve(boundary: ToolBoundary, run: RunContext | str) -> ObservedFacts:
    run_id = run if isinstance(run, str) else run.run_id
    store = boundary._async_store()
    if store is None:
        return await asyncio.to_thread(boundary.observe, run_id)
    entries = await store.progress(run_id)
    return boundary.run_projector.project(run_id, entries, now=boundary._clock())


async def aclose(boundary: ToolBoundary) -> None:
    loop = asyncio.get_running_loop()
    store = boundary._async_stores.pop(loop, None)
    if store is not None:
        await store.aclose()


class AsyncCalls:
    """``ToolBoundary``'s async methods (a mixin, so ``core`` stays small)."""

    async def asubmit(
        self, envelope: ToolCallEnvelope, run: RunContext, *, replay: bool = False
    ) -> Submission:
        """``submit`` for an event loop (``replay`` as there)."""
        return await asubmit(cast("ToolBoundary", self), envelope, run, replay)

    async def ainvoke(
        self,
        envelope: ToolCallEnvelope,
        run: RunContext,
        timeout: float | None = None,
        *,
        replay: bool = False,
    ) -> ToolOutcome:
        """``invoke`` for an event loop: wakes on the call's seal, never polls; returns a
        PROJECTING outcome (``pending``) when ``timeout`` runs out first. ``replay`` as in
        ``invoke``: the same call made again returns the first call's outcome."""
        return await ainvoke(cast("ToolBoundary", self), envelope, run, timeout, replay)

    async def aoutcome(
        self, run_id: str, tool_call_id: str, timeout: float | None = None
    ) -> ToolOutcome:
        """``outcome`` for an event loop. Cancelling the awaiting task stops only the wait:
        the call runs on and its outcome stays readable."""
        return await aoutcome(cast("ToolBoundary", self), run_id, tool_call_id, timeout)

    async def aobserve(self, run: RunContext | str) -> ObservedFacts:
        """``observe`` for an event loop."""
        return await aobserve(cast("ToolBoundary", self), run)

    async def aclose(self) -> None:
        """Closes the running loop's Redis connections of the async calls (its pool and its
        one Pub/Sub connection). Call before the loop ends; a later async call reopens them."""
        await aclose(cast("ToolBoundary", self))
