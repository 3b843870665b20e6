"""The reaper: what happens to calls still PROJECTING past their reap time.

A call whose raw response is kept only lost the worker that was projecting it (killed between
storing the raw response and sealing): its project step is sent again, a bounded number of
times, instead of throwing a good response away as WORKER_LOST. A call whose tool never
started (its message never reached a worker) is sent again, a bounded number of times,
whatever its retry policy: nothing ran. A call whose tool started and went silent (past its
heartbeat timeout, or its max pending time) is retried when its tool's policy retries
WORKER_LOST. Every other due call is sealed WORKER_LOST. Due is judged on the store's clock
(Redis TIME), never this host's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from boundary import CanonicalKey, ErrorCode, ToolRegistry, telemetry
from boundary.flow import Flow
from boundary.steps import AttemptSender, send_attempt
from boundary.store import CanonicalStore, ReapDecision, WriteStatus
from boundary.store.flow import FlowStanding
from tasks.flow_sweep import sweep_flow

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reaped:
    due: int
    sealed: int
    reprojected: int
    #: Calls handed to a new attempt (retried, or re-sent because they never started).
    retried: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "due": self.due,
            "sealed": self.sealed,
            "reprojected": self.reprojected,
            "retried": self.retried,
        }


@dataclass(frozen=True)
class Retries:
    """How the reaper hands lost calls to a new attempt."""

    registry: ToolRegistry
    sender: AttemptSender
    #: Re-sends of a call whose tool never started, before it is sealed WORKER_LOST.
    max_redispatches: int
    #: A new attempt's queue wait before it is due, and the grace past the run's deadline.
    max_pending_s: float
    reap_grace_s: float


def reap_once(
    store: CanonicalStore,
    reproject: Callable[[CanonicalKey], None],
    *,
    retry_after_s: float,
    max_reprojections: int,
    retries: Retries | None = None,
    limit: int = 1000,
) -> Reaped:
    """One reaper pass: re-projects, retries or seals each due call.

    Args:
        reproject: sends the call's project step again (raises when it cannot).
        retry_after_s: when a re-projected call is due again if it is still PROJECTING.
        max_reprojections: re-projections of one call before it is sealed WORKER_LOST.
        retries: how lost calls get a new attempt (``None``: they are sealed).
    """
    # Every step below re-checks, in its script, that the call is still due and its tool
    # did not start since this time (a call granted a slot and started meanwhile is left).
    judged_at = store.now()
    due = store.due_pending(judged_at, limit=limit)
    sealed = reprojected = retried = 0
    for key in due:
        decision = store.requeue_due(
            key,
            retry_after_s=retry_after_s,
            max_reprojections=max_reprojections,
            due_at=judged_at,
        )
        if decision is ReapDecision.REPROJECT:
            try:
                reproject(key)
                reprojected += 1
                continue
            except Exception as exc:
                # Cannot send it: the next pass tries again (the reap time moved on).
                logger.error("re-projection of %s not sent: %s", key.identity, type(exc).__name__)
                continue
        if decision is not ReapDecision.SEAL:
            continue
        if retries is not None and _next_attempt(store, key, retries, judged_at):
            retried += 1
            continue
        if store.seal_error(key, ErrorCode.WORKER_LOST, due_at=judged_at) is WriteStatus.OK:
            sealed += 1
    flow = store.flow
    if retries is not None and isinstance(flow, Flow):
        sweep_flow(store, flow, retries)
    if sealed or reprojected or retried:
        logger.warning(
            "reaper: %d call(s) sealed WORKER_LOST, %d re-projected, %d sent again",
            sealed,
            reprojected,
            retried,
        )
    telemetry.reaped(sealed=sealed, reprojected=reprojected)
    return Reaped(due=len(due), sealed=sealed, reprojected=reprojected, retried=retried)


def _next_attempt(
    store: CanonicalStore, key: CanonicalKey, retries: Retries, judged_at: datetime | None = None
) -> bool:
    """Hands a lost call to its next attempt when it may have one; ``True`` when the call
    is no longer this pass's to seal."""
    state = store.attempt_state(key)
    if state is None or state.has_raw:
        return state is None  # sealed or gone meanwhile: nothing to seal
    spec = retries.registry.get(state.tool_name)
    if not state.started and _waits_for_slot(store, key, state.tool_name, retries):
        return True
    if not state.started:
        # Nothing ran: safe to send again whatever the policy, a bounded number of times.
        if state.redispatches >= retries.max_redispatches:
            return False
        redispatch, backoff_s = True, 0.0
    else:
        if spec is None or not spec.retry.retries(ErrorCode.WORKER_LOST, state.tool_runs):
            return False
        redispatch, backoff_s = False, spec.retry.backoff(state.tool_runs)
    moved = store.retry_attempt(
        key,
        attempt=state.attempt,
        reap_after_s=backoff_s + retries.max_pending_s,
        reap_grace_s=retries.reap_grace_s,
        redispatch=redispatch,
        due_at=judged_at,
    )
    if isinstance(moved, WriteStatus):
        return True  # sealed, projected, moved on or started by someone else meanwhile
    try:
        send_attempt(
            store,
            retries.sender,
            key,
            spec,
            attempt=moved,
            countdown_s=backoff_s,
            keep=redispatch,
        )
    except Exception as exc:
        # The record waits for attempt ``moved``; unsent, it is due again after its queue
        # wait and is then re-sent (bounded) or sealed.
        logger.error("attempt %d of %s not sent: %s", moved, key.identity, type(exc).__name__)
        return True
    logger.warning("call %s lost: attempt %d sent", key.identity, moved)
    return True


def _waits_for_slot(store: CanonicalStore, key: CanonicalKey, tool: str, retries: Retries) -> bool:
    """A limited tool's call that never started because it waits for a slot is not lost:
    its reap time moves on (one admitted and never put in line is put there). ``True`` when
    the call is left to its line."""
    flow = store.flow
    limits = flow.limits(tool) if isinstance(flow, Flow) else None
    if limits is None or not isinstance(flow, Flow):
        return False
    state = flow.ops.state(tool, limits, key)
    if state.standing is FlowStanding.ADMITTED:
        flow.confirm(key, tool, limits)
        return True
    if state.standing is FlowStanding.WAITS:
        store.defer_reap(key, reap_after_s=retries.max_pending_s, reap_grace_s=retries.reap_grace_s)
        return True
    return False
