"""The reaper: what happens to calls still PROJECTING past their reap time.

A call whose raw response is kept only lost the worker that was projecting it (killed between
storing the raw response and sealing): its project step is sent again, a bounded number of
times, instead of throwing a good response away as WORKER_LOST. Every other due call is sealed
WORKER_LOST. Due is judged on the store's clock (Redis TIME), never this host's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from boundary import CanonicalKey, ErrorCode, telemetry
from boundary.store import CanonicalStore, ReapDecision, WriteStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reaped:
    due: int
    sealed: int
    reprojected: int

    def as_dict(self) -> dict[str, int]:
        return {"due": self.due, "sealed": self.sealed, "reprojected": self.reprojected}


def reap_once(
    store: CanonicalStore,
    reproject: Callable[[CanonicalKey], None],
    *,
    retry_after_s: float,
    max_reprojections: int,
    limit: int = 1000,
) -> Reaped:
    """One reaper pass: re-projects or seals each due call.

    Args:
        reproject: sends the call's project step again (raises when it cannot).
        retry_after_s: when a re-projected call is due again if it is still PROJECTING.
        max_reprojections: re-projections of one call before it is sealed WORKER_LOST.
    """
    due = store.due_pending(limit=limit)
    sealed = reprojected = 0
    for key in due:
        decision = store.requeue_due(
            key, retry_after_s=retry_after_s, max_reprojections=max_reprojections
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
        if decision is ReapDecision.SEAL and (
            store.seal_error(key, ErrorCode.WORKER_LOST) is WriteStatus.OK
        ):
            sealed += 1
    if sealed or reprojected:
        logger.warning(
            "reaper: %d call(s) sealed WORKER_LOST, %d re-projected", sealed, reprojected
        )
    telemetry.reaped(sealed=sealed, reprojected=reprojected)
    return Reaped(due=len(due), sealed=sealed, reprojected=reprojected)
