"""The reaper's pass over fleet flow control, for each limited tool (``boundary.flow``).

A step that ends a call gives up its slot in the same breath as its seal; this pass catches
what such a step could not finish: a slot whose holder was sealed while the store did not
answer the release (checked when its lease is due), a call admitted ahead of its record whose
submitter died before putting it in line, a grant whose execute message could not be sent
(sent again as a new attempt, as the reaper does for messages that never reached a worker),
and waiting calls whose run's deadline passed (sealed RUN_DEADLINE_EXCEEDED, never run). It
also pumps each line, in case a scheduled wake-up was lost.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from boundary import CanonicalKey, ErrorCode, InvocationStatus, StoreError
from boundary.flow import Flow
from boundary.steps import send_attempt
from boundary.store import CanonicalStore, WriteStatus
from boundary.store.flow import DueLease, ToolLimits

if TYPE_CHECKING:
    from tasks.reaper import Retries

logger = logging.getLogger(__name__)


def sweep_flow(store: CanonicalStore, flow: Flow, retries: Retries) -> int:
    """One pass over every limited tool; the number of slots and calls it set right."""
    fixed = 0
    for tool in flow.limited_tools():
        try:
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
    moved = store.retry_attempt(
        key,
        attempt=state.attempt,
        reap_after_s=retries.max_pending_s,
        reap_grace_s=retries.reap_grace_s,
        redispatch=True,
        unstarted=True,  # re-checked in the script: a call that started meanwhile is left
    )
    if isinstance(moved, WriteStatus):
        return 0
    try:
        spec = retries.registry.get(tool)
        send_attempt(store, retries.sender, key, spec, attempt=moved, countdown_s=0.0, keep=True)
    except Exception as exc:
        logger.error("flow: attempt %d of %s not sent: %s", moved, key.identity, type(exc).__name__)
    return 1
