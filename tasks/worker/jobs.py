"""Re-projection jobs in the workers: ``reproject_chunk`` does one chunk of one lane of a job
and sends the lane's next chunk, so a job outlives the command that started it. A chunk runs
under the fleet-wide cap of chunks at once (``tasks.worker.chunk_slots``): one that cannot
have a slot waits in the cap's line in Redis, and is sent again by whoever frees one.

A job is a hash in Redis (``boundary.store.redis_jobs``): its selection, each lane's cursor
and the totals. A chunk's totals, report lines and cursor move in one script after the chunk
is done, so a worker killed mid-chunk (even ``kill -9``) leaves the lane where it was: the
chunk's message comes back (late acks) or ``reproject --job ID`` sends the lane again, and the
chunk is done once more, counted once. A second task on the same lane (a redelivered message
beside a sent one) finds the cursor moved and stops without counting.

The task's result and its progress events carry counts only: never a raw response, a result
or a diff (those are in the job's lines, read by the command).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from boundary import StoreError
from boundary.flow import Flow
from boundary.reprojection import (
    ChunkReport,
    Reprojector,
    Selection,
    dumps_lines,
    page_runs,
)
from boundary.store.flow import FlowStanding, ToolLimits
from boundary.store.redis_jobs import Checkpoint, Job, RedisJobs
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import REPROJECT_CHUNK, app
from tasks.worker.chunk_slots import REPROJECT_SLOTS, lane_key, log_failures, send_chunk, take
from tasks.worker.process import worker_runtime
from tasks.worker.step_store import retrying

logger = logging.getLogger(__name__)

#: Runs per chunk of a lane (a chunk is one task, one checkpoint).
DEFAULT_CHUNK_RUNS = 100
#: Lanes of a job: chunks of one job running at once across the fleet.
DEFAULT_LANES = 2
#: The custom task event a chunk sends (Flower shows the task as PROGRESS).
PROGRESS_EVENT = "task-progress"


def _jobs() -> RedisJobs:
    runtime = get_runtime()
    jobs = jobs_of(runtime.store, runtime.settings)
    if jobs is None:
        raise TypeError("jobs need a Redis canonical store")
    return jobs


def jobs_of(store: Any, settings: Settings) -> RedisJobs | None:
    """The store's jobs, with the report's bounds of ``settings`` (TTL, bytes)."""
    return RedisJobs.of(
        store, ttl_s=settings.job_report_ttl_s, max_bytes=settings.job_report_max_bytes
    )


def send_lane(job_id: str, lane: int, countdown_s: float = 0.0) -> None:
    """Sends the lane's next chunk to the ``reprojections`` queue."""
    send_chunk(job_id, lane, countdown_s=countdown_s)


def send_lanes(job: Job) -> int:
    """Sends a chunk for every lane of a running job that has not ended: a new job's start,
    or a stalled one's resume (a lane whose task is still out does its chunk once: the
    checkpoint refuses the other). The lanes sent."""
    if not job.active:
        return 0
    lanes = [lane for lane in range(job.lanes) if lane not in job.ended]
    for lane in lanes:
        send_lane(job.job_id, lane)
    return len(lanes)


def pace_s(spec: dict[str, Any], lanes: int, records: int) -> float:
    """The countdown before a lane's next chunk under ``--rate N/PERIOD_S``: the lane's share
    of the rate spent on this chunk's records."""
    rate = spec.get("rate")
    if not rate or not records:
        return 0.0
    limit, period_s = rate
    return float(records) * float(period_s) * lanes / float(limit)


def _progress(job: Job, lane: int, runs: int, code: int) -> dict[str, Any]:
    return {"job_id": job.job_id, "lane": lane, "runs": runs, "checkpoint": code}


def _send_progress(task: Any, job: Job) -> None:
    """A ``task-progress`` event with the job's totals so far (counts only), sent as the
    chunk starts: while it runs, Flower shows its task in ``PROGRESS`` with them."""
    if not getattr(task.request, "id", None):
        return
    fields = {"job_id": job.job_id, "state": job.state, "chunks": job.chunks} | {
        name: job.totals.get(name, 0) for name in ("runs", "records", "records_changed", "failed")
    }
    text = json.dumps(fields, sort_keys=True)
    try:
        task.send_event(PROGRESS_EVENT, progress_message=text, result=text)
    except Exception as exc:  # best effort: monitoring never fails a chunk
        logger.warning("job %s progress event not sent: %s", job.job_id, type(exc).__name__)


def _token(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


@app.task(name=REPROJECT_CHUNK, acks_late=True, bind=True)
def reproject_chunk(
    self: Any, job_id: str, lane: int, slot: int | None = None, seen: int | None = None
) -> dict[str, Any]:
    """One chunk of one lane of job ``job_id`` under the fleet-wide cap; sends the lane's
    next chunk. ``slot``: the attempt it was handed a slot for (sent from the cap's line);
    ``seen``: the attempt it found holding its lane before. Returns counts only."""
    if not isinstance(job_id, str) or not isinstance(lane, int) or not _token(slot):
        return {"error": "INVALID_ARGUMENTS"}
    if not _token(seen):
        return {"error": "INVALID_ARGUMENTS"}
    try:
        result = _capped(job_id, lane, slot, seen, lambda job: _send_progress(self, job))
    except StoreError:
        # The lane stays where it was: ``reproject --job ID`` resumes it.
        logger.error("job %s lane %d: store unavailable; the lane waits", job_id, lane)
        return {"job_id": job_id, "lane": lane, "error": "STORE_UNAVAILABLE"}
    except Exception as exc:
        # A bug: the lane ends and the job ends failed (a projector's own exceptions are
        # PROJECTION_FAILED in the report, never here). Only the type: the text may hold
        # data from a raw response.
        logger.error("job %s lane %d failed: %s", job_id, lane, type(exc).__name__)
        _fail_lane(job_id, lane)
        return {"job_id": job_id, "lane": lane, "error": "JOB_FAILED"}
    return result


def _fail_lane(job_id: str, lane: int) -> None:
    try:
        jobs = _jobs()
        job = jobs.get(job_id)
        if job is not None and lane in job.cursors:
            cursor = job.cursors[lane]
            code = jobs.checkpoint(
                job_id, lane, before=cursor, after=cursor, totals={}, lines=[], failed=True
            )
            log_failures(jobs, job_id, code)
    except StoreError:
        logger.error("job %s lane %d: not marked failed (store unavailable)", job_id, lane)


def _capped(
    job_id: str, lane: int, slot: int | None, seen: int | None, on_start: Callable[[Job], None]
) -> dict[str, Any]:
    """The chunk once it holds a slot of the cap; its slot is given up before the lane's
    next chunk is sent, so that chunk takes its turn behind the lanes waiting in line."""
    runtime = worker_runtime()
    flow = runtime.store.flow
    if not isinstance(flow, Flow) or REPROJECT_SLOTS not in flow.reserved:
        result, countdown = retrying(lambda: _chunk(job_id, lane, on_start))
    else:

        def again(holder: int, delay_s: float) -> None:
            send_chunk(job_id, lane, seen=holder or None, countdown_s=delay_s)

        if slot is None and _stopping(job_id) and not _holds(flow, job_id, lane):
            # A late chunk of a cancelled job's lane that holds no slot asks none (it would
            # join the line behind which the next job's lanes wait): it ends the lane where
            # it is. A lane holding a slot has a chunk at work: it goes the usual way (it
            # comes back once that chunk has ended the lane).
            return retrying(lambda: _chunk(job_id, lane, on_start))[0]
        taken = retrying(
            lambda: take(flow, _jobs(), job_id, lane, slot=slot, seen=seen, on_again=again)
        )
        if taken.hold is None:
            return {"job_id": job_id, "lane": lane, "state": taken.state}
        with taken.hold:
            result, countdown = retrying(lambda: _chunk(job_id, lane, on_start))
    if countdown is not None:
        send_lane(job_id, lane, countdown)
    return result


def _stopping(job_id: str) -> bool:
    """The job is cancelling, over, or gone (one read of its hash)."""
    job = retrying(lambda: _jobs().get(job_id))
    return job is None or not job.active or job.cancel


def _holds(flow: Flow, job_id: str, lane: int) -> bool:
    """The lane holds a slot of the cap (one read of the cap's keys)."""
    state = retrying(lambda: flow.ops.state(REPROJECT_SLOTS, ToolLimits(), lane_key(job_id, lane)))
    return state.standing is FlowStanding.HOLDS


def _chunk(
    job_id: str, lane: int, on_start: Callable[[Job], None]
) -> tuple[dict[str, Any], float | None]:
    """One chunk: its result, and the countdown of the lane's next chunk (``None``: none)."""
    runtime = get_runtime()
    jobs = _jobs()
    job = jobs.get(job_id)
    if job is None or not job.active or lane in job.ended or lane not in job.cursors:
        return {"job_id": job_id, "lane": lane, "state": job.state if job else "gone"}, None
    on_start(job)
    if not job.taken:
        jobs.mark_taken(job_id)
    before = job.cursors[lane]
    if job.cancel:
        code = jobs.checkpoint(job_id, lane, before=before, after=before, totals={}, lines=[])
        log_failures(jobs, job_id, code)
        return _progress(job, lane, 0, code), None
    spec = job.spec
    selection = Selection.from_json(spec["selection"])
    runs, after = page_runs(
        runtime.store.client,
        selection,
        before,
        size=int(spec["chunk"]),
        lane=lane,
        lanes=job.lanes,
        high_ms=int(spec["high_ms"]),
    )
    report = ChunkReport()
    if runs:
        reprojector = Reprojector(runtime.store, runtime.registry, write=bool(spec["write"]))
        report = reprojector.runs(runs, selection)
    code = jobs.checkpoint(
        job_id,
        lane,
        before=before,
        after=after,
        totals=dict(report.totals),
        lines=dumps_lines(report.lines),
    )
    log_failures(jobs, job_id, code)
    countdown = None
    if code == Checkpoint.GOES_ON:
        countdown = pace_s(spec, job.lanes, report.totals["records"])
    elif code == Checkpoint.NOT_MINE:
        logger.info("job %s lane %d: chunk done by another task; not counted", job_id, lane)
    return _progress(job, lane, len(runs), code), countdown
