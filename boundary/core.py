"""``ToolBoundary``: the one door every tool call of an agent passes.

A thin door: it holds the boundary's parts and settings, and each call goes through to the
sync path (``sync_calls``) or the async path (``aio_calls``). Both share the pure steps of
``call_steps`` and see the door through the Protocols of ``door``; neither imports this
module or the other path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from boundary import sync_calls, turns
from boundary.aio_calls import AsyncCalls
from boundary.dispatch import Dispatcher
from boundary.flow import Flow
from boundary.handle import DEFAULT_CALL_TIMEOUT_S, RunBoundary
from boundary.models import (
    ObservedFacts,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.progress import RunProgressProjector
from boundary.registry import ToolRegistry
from boundary.steps import AttemptSender
from boundary.store.base import CanonicalStore, OpenRunStatus

#: How long a call may stay PROJECTING (queue wait included) before the reaper may seal it,
#: in seconds, when its run's deadline is later or absent.
DEFAULT_MAX_PENDING_S = 3600.0
#: Extra time past a call's deadline before the reaper seals it WORKER_LOST, in seconds.
DEFAULT_REAP_GRACE_S = 60.0
#: Longest single wait on the dispatcher before ``outcome`` reads the record again, seconds.
DEFAULT_POLL_S = 1.0


class ToolBoundary:
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
        self.clock = clock
        # Flow control (limited tools) on the store: its seals hand freed slots on, and the
        # calls it hands a slot go out through this dispatcher (the store's first one wins).
        Flow.install(store, registry, dispatcher if isinstance(dispatcher, AttemptSender) else None)
        self._aio = AsyncCalls(self)

    # --- Calls -----------------------------------------------------------------------------

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
        return sync_calls.submit(self, envelope, run, replay=replay)

    def outcome(self, run_id: str, tool_call_id: str, timeout: float | None = None) -> ToolOutcome:
        """The outcome of an accepted call, waiting up to ``timeout`` seconds (``None``: no
        limit) for it to be sealed.

        Returns RECORD_NOT_FOUND at once for an unknown or expired call. Never raises for
        time: a wait that runs out returns the call's real state, a PROJECTING outcome
        (``pending`` true) while it still runs; ask again later with the same ids.
        """
        return sync_calls.outcome(self, run_id, tool_call_id, timeout)

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
        return sync_calls.invoke(self, envelope, run, timeout, replay=replay)

    def submit_many(
        self, envelopes: Sequence[ToolCallEnvelope], run: RunContext
    ) -> list[Submission]:
        """``submit`` of a model turn's calls (of ``run``), in one round trip each way: each
        call preflighted on its own (a refused call refuses no other), the accepted ones
        created in ONE store script in the order given (duplicates, also within the turn,
        and budgets charged in order, exactly as one by one), all sent in ONE broker round
        trip (a failed send seals its calls DISPATCH_FAILED). A limited tool's call asks for
        its slot first, as one by one (TOOL_BUSY when its line is full). One ``Submission``
        per envelope, in the order given. Never raises for bad input."""
        return turns.submit_many(self, envelopes, run)

    def invoke_many(
        self,
        envelopes: Sequence[ToolCallEnvelope],
        run: RunContext,
        timeout: float | None = None,
    ) -> list[ToolOutcome]:
        """``submit_many`` then wait for every accepted call on one subscription (the run's
        seal channel), ``timeout`` bounding the whole; one outcome per envelope, in the
        order given (a PROJECTING one, ``pending``, for a call still running at the end)."""
        return turns.invoke_many(self, envelopes, run, timeout)

    def for_run(self, run: RunContext, *, timeout: float = DEFAULT_CALL_TIMEOUT_S) -> RunBoundary:
        """A handle on ``run``: ``for_run(run).call(tool_call_id, tool_name, arguments)``
        needs no envelope and no repeated run id. ``timeout`` is its calls' default wait."""
        return RunBoundary(self, run, timeout=timeout)

    def observe(
        self, run: RunContext | str, *, projector_version: str | None = None
    ) -> ObservedFacts:
        """The run's READY calls as bounded observed facts, in acceptance order.

        ``projector_version``: built from the side projections of that projector version
        (``tool-boundary reproject --projectors current --write``) where present.

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        run_id = run if isinstance(run, str) else run.run_id
        return sync_calls.observe(self, run_id, projector_version)

    # --- The same calls for an event loop ----------------------------------------------------

    async def asubmit(
        self, envelope: ToolCallEnvelope, run: RunContext, *, replay: bool = False
    ) -> Submission:
        """``submit`` for an event loop (``replay`` as there)."""
        return await self._aio.asubmit(envelope, run, replay=replay)

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
        return await self._aio.ainvoke(envelope, run, timeout, replay=replay)

    async def asubmit_many(
        self, envelopes: Sequence[ToolCallEnvelope], run: RunContext
    ) -> list[Submission]:
        """``submit_many`` for an event loop (the turn goes on one thread: one script, one
        publish)."""
        return await self._aio.asubmit_many(envelopes, run)

    async def ainvoke_many(
        self,
        envelopes: Sequence[ToolCallEnvelope],
        run: RunContext,
        timeout: float | None = None,
    ) -> list[ToolOutcome]:
        """``invoke_many`` for an event loop: woken by the calls' seals, never polls."""
        return await self._aio.ainvoke_many(envelopes, run, timeout)

    async def aoutcome(
        self, run_id: str, tool_call_id: str, timeout: float | None = None
    ) -> ToolOutcome:
        """``outcome`` for an event loop. Cancelling the awaiting task stops only the wait:
        the call runs on and its outcome stays readable."""
        return await self._aio.aoutcome(run_id, tool_call_id, timeout)

    async def aobserve(
        self, run: RunContext | str, *, projector_version: str | None = None
    ) -> ObservedFacts:
        """``observe`` for an event loop."""
        return await self._aio.aobserve(run, projector_version)

    async def aclose(self) -> None:
        """Closes the running loop's Redis connections of the async calls (its pool and its
        one Pub/Sub connection). Call before the loop ends; a later async call reopens them."""
        await self._aio.aclose()

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
        return sync_calls.close_run(self, run_id)

    def cancel(self, run_id: str, tool_call_id: str) -> ToolOutcome:
        """Ends a PROJECTING call: one Lua script seals it ERROR ``CANCELLED`` only if it is
        still PROJECTING, so the tool's later return (or anything else) cannot change it; then
        the dispatcher revokes the call's queued work, if it can.

        Returns the call's outcome as its record now says: ``CANCELLED``, or the outcome it had
        already reached (a finished call stays finished); ``RECORD_NOT_FOUND`` for an unknown
        or expired call. Never raises for bad input.
        """
        return sync_calls.cancel(self, run_id, tool_call_id)
