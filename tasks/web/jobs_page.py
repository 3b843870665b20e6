"""The web view's jobs pages: ``/jobs``, re-projection jobs with their state and progress,
read from the jobs index and one pipeline of job hashes (counts only, nothing raw), and for
a running job where its lanes stand at the fleet's cap of chunks (one read a lane);
``/jobs/ID``, one job with its versions and failures by type, live counts (server-sent
events) and Cancel (CSRF-checked as a call's)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from boundary.models import is_safe_id
from boundary.reprojection import summary
from boundary.store.base import CanonicalStore
from boundary.store.redis_jobs import RedisJobs
from tasks.worker.chunk_slots import cancel, lane_states, slots_text, slots_view

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


def job_view(store: CanonicalStore, job_id: str) -> dict[str, Any] | None:
    """One job: its state, totals, versions and failures by tool and type (counts only)."""
    jobs = RedisJobs.of(store)
    job = jobs.get(job_id) if jobs is not None else None
    if job is None:
        return None
    shown = job.as_dict()
    return {
        "job_id": job.job_id,
        "state": shown["state"],
        "active": job.active and not job.cancel,
        "write": bool(job.spec.get("write")),
        "lanes": f"{job.lanes_ended}/{job.lanes}",
        "chunks": job.chunks,
        "created": _when(job.created_at_ms),
        "updated": _when(job.updated_at_ms),
        "finished": _when(job.finished_at_ms),
        "totals": summary(job.totals),
        "total_runs": job.spec.get("total_runs"),
    }


def cancel_job_action(job_id: str) -> str:
    return f"cancel-job:{job_id}"


async def job(request: Request) -> Response:
    """``GET /jobs/{job_id}``: totals, versions, failures by type, and Cancel."""
    view = request.app.state.view
    job_id = request.path_params["job_id"]
    found = await view.read(lambda: job_view(view.store, job_id)) if is_safe_id(job_id) else None
    if found is None:
        return view.problem(404, "No such job", "No job has this id (it may have expired).")  # type: ignore[no-any-return]
    return view.page(  # type: ignore[no-any-return]
        "job.html", title=f"Job {job_id}", job=found, action=cancel_job_action(job_id)
    )


async def cancel_job(request: Request) -> Response:
    """``POST /jobs/{job_id}/cancel`` (CSRF-checked, as a call's cancel)."""
    view = request.app.state.view
    job_id = request.path_params["job_id"]
    if not is_safe_id(job_id):
        return view.problem(404, "No such job", "No job has this id.")  # type: ignore[no-any-return]
    form = dict(parse_qsl((await request.body()).decode("utf-8", errors="replace")))
    if not view.csrf.valid(cancel_job_action(job_id), form.get("csrf", "")):
        return view.problem(  # type: ignore[no-any-return]
            403, "Refused", "The form is out of date (CSRF check): reload the page and try again."
        )
    jobs = RedisJobs.of(view.store)
    if jobs is not None:
        store = view.store
        await view.read(lambda: cancel(store, jobs, job_id))
    return RedirectResponse(f"/jobs/{quote(job_id, safe='')}", status_code=303)


#: Seconds between two updates of a job's live page, and the longest a stream stays open.
JOB_EVENTS_EVERY_S = 1.0
JOB_EVENTS_MAX_S = 3600.0


def _live(found: dict[str, Any] | None) -> dict[str, Any]:
    """What a job's page updates live: counts and its state, nothing else."""
    if found is None:
        return {"state": "gone"}
    totals = found["totals"]
    return (
        {
            "state": found["state"],
            "active": found["active"],
            "chunks": found["chunks"],
            "updated": found["updated"],
            "lanes": found["lanes"],
        }
        | {
            name: totals[name]
            for name in ("runs", "runs_changed", "records", "records_changed", "fields_changed")
        }
        | {"failed": totals["failed"], "evidence_flips": totals["evidence_flips"]}
    )


async def job_events(request: Request) -> Response:
    """``GET /jobs/{job_id}/events``: the job's counts as server-sent events, once a second,
    until it has ended (then one last event) or the page goes."""
    view = request.app.state.view
    job_id = request.path_params["job_id"]
    if not is_safe_id(job_id):
        return Response(status_code=404)

    async def stream() -> AsyncIterator[str]:
        began = time.monotonic()
        while time.monotonic() - began < JOB_EVENTS_MAX_S:
            found = await view.read(lambda: job_view(view.store, job_id))
            live = _live(found)
            yield f"data: {json.dumps(live, sort_keys=True)}\n\n"
            if live["state"] not in ("running", "cancelling") or await request.is_disconnected():
                return
            await asyncio.sleep(JOB_EVENTS_EVERY_S)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )
