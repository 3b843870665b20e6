"""The web view's jobs page (``/jobs``): re-projection jobs with their state and progress,
read from the jobs index and one pipeline of job hashes (counts only, nothing raw), and for
a running job where its lanes stand at the fleet's cap of chunks (one read a lane)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from boundary.reprojection import summary
from boundary.store.base import CanonicalStore
from boundary.store.redis_jobs import RedisJobs
from tasks.worker.chunk_slots import lane_states, slots_text, slots_view

#: Jobs the page lists, newest first.
JOBS_PAGE = 50


def _when(epoch_ms: int | None) -> str:
    if not epoch_ms:
        return "-"
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="seconds")


def jobs_view(store: CanonicalStore) -> dict[str, Any]:
    jobs = RedisJobs.of(store)
    if jobs is None:
        return {"jobs": [], "available": False}
    rows = []
    flow_ops = getattr(store, "flow_ops", None)
    for job in jobs.recent(JOBS_PAGE):
        shown = job.as_dict()
        # A running job's lanes at the fleet's cap of chunks: holding a slot, or waiting.
        states = lane_states(flow_ops, job) if flow_ops is not None else {}
        rows.append(
            {
                "job_id": job.job_id,
                "state": shown["state"],
                "write": bool(job.spec.get("write")),
                "lanes": f"{job.lanes_ended}/{job.lanes}",
                "chunks": job.chunks,
                "created": _when(job.created_at_ms),
                "updated": _when(job.updated_at_ms),
                "totals": summary(job.totals),
                "slots": slots_text(slots_view(states)) if states else None,
            }
        )
    return {"jobs": rows, "available": True}


async def jobs(request: Request) -> Response:
    """``GET /jobs``."""
    view = request.app.state.view
    page = await view.read(lambda: jobs_view(view.store))
    return view.page("jobs.html", title="Jobs", **page)  # type: ignore[no-any-return]
