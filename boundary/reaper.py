"""The reaper: what happens to calls still PROJECTING past their reap time.

A call whose raw response is kept only lost the worker that was projecting it (killed between
storing the raw response and sealing): its project step is sent again, a bounded number of
times, instead of throwing a good response away as WORKER_LOST. A call whose tool never
started (its message never reached a worker) is sent again, a bounded number of times,
whatever its retry policy: nothing ran. A call whose tool started and went silent (past its
heartbeat timeout, or its max pending time) is retried when its tool's policy retries
WORKER_LOST. Every other due call is sealed WORKER_LOST. Due is judged on the store's clock
(Redis TIME), never this host's.

The flow sweep (``sweep_flow``) is the reaper's pass over fleet flow control, for each
limited tool (``boundary.flow``). A step that ends a call gives up its slot in the same breath
as its seal; this pass catches what such a step could not finish: a slot whose holder was
sealed while the store did not answer the release (checked when its lease is due), a call
admitted ahead of its record whose submitter died before putting it in line, a grant whose
execute message could not be sent (sent again as a new attempt, as the reaper does for
messages that never reached a worker), and waiting calls whose run's deadline passed (sealed
RUN_DEADLINE_EXCEEDED, never run). It also pumps each line, in case a scheduled wake-up was
lost. The fleet's own entries (``boundary.flow.Reserved``: re-projection chunks) have no call
records to read: their sweep (``sweep_reserved``) frees each slot whose lease ran out unrenewed.

No Celery here: the worker's ``tool_boundary.reap`` task (``tasks.worker.upkeep``) calls
``reap_once`` with its store, its sender and a way to send a project step again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from boundary import telemetry
from boundary.errors import ErrorCode, StoreError
from boundary.flow import RELEASE_RENEWED, Flow, Reserved
from boundary.models import CanonicalKey, InvocationStatus
from boundary.registry import ToolRegistry
from boundary.steps.attempts import AttemptSender, next_attempt
from boundary.store.base import CanonicalStore, ReapDecision, WriteStatus
from boundary.store.flow import DueLease, FlowStanding, ToolLimits

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
    moved = next_attempt(
        store,
        retries.sender,
        key,
        spec,
        attempt=state.attempt,
        backoff_s=backoff_s,
        max_pending_s=retries.max_pending_s,
        reap_grace_s=retries.reap_grace_s,
        redispatch=redispatch,
        due_at=judged_at,
    )
    if moved is None or isinstance(moved, WriteStatus):
        # Sealed, projected, moved on or started by someone else meanwhile; or moved on and
        # not sent: the record waits for that attempt, due again after its queue wait, and
        # is then re-sent (bounded) or sealed.
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


# --- The flow sweep ---------------------------------------------------------------------


def sweep_flow(store: CanonicalStore, flow: Flow, retries: Retries) -> int:
    """One pass over every limited tool (and every reserved entry this process knows); the
    number of slots and calls it set right."""
    fixed = 0
    for tool in flow.limited_tools():
        try:
            entry = flow.reserved.get(tool)
            if entry is not None:
                fixed += sweep_reserved(flow, entry)
            else:
                fixed += _sweep_tool(store, flow, retries, tool)
        except StoreError:
            logger.warning("flow sweep of %s stopped (store)", tool)
    if fixed:
        logger.warning("flow sweep: %d slot(s) or call(s) set right", fixed)
    return fixed


def _sweep_tool(store: CanonicalStore, flow: Flow, retries: Retries, tool: str) -> int:
    limits = flow.limits(tool) or ToolLimits()
    swept = flow.ops.sweep(tool, limits)
    flow.deliver(tool, swept.reply)
    fixed = 0
    for key in swept.late:
        # Out of line already: it never runs.
        if store.seal_error(key, ErrorCode.RUN_DEADLINE_EXCEEDED) is WriteStatus.OK:
            fixed += 1
    for lease in swept.due:
        fixed += _check_lease(store, flow, tool, limits, lease)
    for key in swept.stale:
        record = store.get(key, with_raw=False)
        if record is not None and record.status is InvocationStatus.PROJECTING:
            flow.confirm(key, tool, limits)
        else:
            flow.release(key, tool, limits)
        fixed += 1
    for key in swept.unsent:
        fixed += _send_again(store, flow, retries, tool, key)
    return fixed


def _check_lease(
    store: CanonicalStore, flow: Flow, tool: str, limits: ToolLimits, lease: DueLease
) -> int:
    """A slot due for a check: kept while its holder's attempt runs (or is on its way), given
    up when the call is sealed or gone, moved to the call's current attempt otherwise."""
    record = store.get(lease.key, with_raw=False)
    if record is None or record.status is not InvocationStatus.PROJECTING:
        # Only the slot of the attempt this check read (a newer one's is its own).
        flow.release(lease.key, tool, limits, attempt=lease.attempt)
        return 1
    if record.attempt == lease.attempt:
        flow.ops.renew(tool, limits, lease.key, lease.attempt)
        return 0
    # The call moved on to another attempt whose slot was never asked for (the store did not
    # answer its retry): that attempt was not sent; it takes a slot like any other now.
    flow.requeue(lease.key, tool, attempt=record.attempt)
    return 1


def _send_again(
    store: CanonicalStore,
    flow: Flow,
    retries: Retries,
    tool: str,
    key: CanonicalKey,
) -> int:
    """A grant whose message failed to send: a new attempt keeps the slot and is sent (the
    old attempt's message, should it arrive after all, is stale: it runs nothing)."""
    state = store.attempt_state(key)
    if state is None or state.has_raw:
        if state is None:
            flow.release(key, tool, flow.limits(tool) or ToolLimits())
        return 1
    if state.started:
        return 0  # it reached a worker after all
    moved = next_attempt(
        store,
        retries.sender,
        key,
        retries.registry.get(tool),
        attempt=state.attempt,
        backoff_s=0.0,
        max_pending_s=retries.max_pending_s,
        reap_grace_s=retries.reap_grace_s,
        redispatch=True,
        unstarted=True,  # re-checked in the script: a call that started meanwhile is left
    )
    return 0 if isinstance(moved, WriteStatus) else 1


# --- The sweep of a reserved entry (no call records) ------------------------------------


def sweep_reserved(flow: Flow, entry: Reserved) -> int:
    """One pass over one of the fleet's own entries (``boundary.flow.Reserved``). Its
    holders have no call record: a slot whose lease ran out unrenewed (its holder died or
    stalled past ``lease_s``) is freed, fenced by the attempt the pass read and re-checked
    as expired in the freeing script (a holder that renewed since keeps it); the slot goes
    to the next holder in line. A grant whose message failed to send is sent again (its
    holder keeps the slot). The slots and holders set right."""
    limits = entry.limits
    swept = flow.ops.sweep(entry.name, limits)
    flow.deliver(entry.name, swept.reply)
    fixed = 0
    for lease in swept.due:
        reply = flow.ops.release(entry.name, limits, lease.key, attempt=lease.attempt, expired=True)
        if reply.code == RELEASE_RENEWED:
            continue  # renewed since the pass read it: its holder lives
        flow.deliver(entry.name, reply)
        if reply.code == 1:
            logger.warning(
                "flow sweep: %s's lease of %s expired (attempt %d): slot freed",
                lease.key.identity,
                entry.name,
                lease.attempt,
            )
            fixed += 1
    for key in (*swept.stale, *swept.late):
        # Never written by a reserved entry's holders (they join the line at once, with no
        # deadline): dropped.
        flow.deliver(entry.name, flow.ops.release(entry.name, limits, key))
        fixed += 1
    for key in swept.unsent:
        state = flow.ops.state(entry.name, limits, key)
        if state.standing is FlowStanding.HOLDS:
            flow.send(key, entry.name, state.attempt)
            fixed += 1
    return fixed
