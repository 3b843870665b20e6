"""The worker's upkeep tasks: the reaper's pass (``boundary.reaper``) and a limited tool's
wake-up (``boundary.flow``). Each logs a failure by its type only and returns."""

from __future__ import annotations

import logging

from boundary.flow import Flow
from boundary.reaper import Retries, reap_once
from tasks.wiring.app import FLOW_WAKE, REAP, app
from tasks.worker.process import attempt_sender, project_sender, worker_runtime

__all__ = ["reap_stuck_calls", "wake_flow"]

logger = logging.getLogger(__name__)


@app.task(name=REAP)
def reap_stuck_calls() -> dict[str, int]:
    """Re-projects each call past its reap time whose raw response is kept; seals the others
    ERROR/WORKER_LOST (see ``boundary.reaper``)."""
    try:
        runtime = worker_runtime()
        settings = runtime.settings
        retries = Retries(
            registry=runtime.registry,
            sender=attempt_sender(),
            max_redispatches=settings.max_redispatches,
            max_pending_s=settings.max_pending_s,
            reap_grace_s=settings.reap_grace_s,
        )
        reaped = reap_once(
            runtime.store,
            project_sender.send_projection,
            retry_after_s=settings.projection_timeout_s + settings.reap_grace_s,
            max_reprojections=settings.max_reprojections,
            retries=retries,
        )
    except Exception as exc:
        logger.error("reaper failed: %s", type(exc).__name__)
        return {"due": 0, "sealed": 0, "reprojected": 0, "retried": 0}
    return reaped.as_dict()


@app.task(name=FLOW_WAKE, ignore_result=True)
def wake_flow(tool: str) -> int:
    """Hands a limited tool's free slots to its line (scheduled for when its rate limit lets
    the next call start); the number of calls sent."""
    try:
        flow = worker_runtime().store.flow
        return flow.pump(tool) if isinstance(flow, Flow) else 0
    except Exception as exc:
        # The reaper's pass pumps every limited tool: the next one does what this could not.
        logger.error("flow wake-up failed: %s", type(exc).__name__)
        return 0
