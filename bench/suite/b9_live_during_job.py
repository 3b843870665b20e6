"""B9: live calls during a re-projection job (issue 40, items 5 and 6): the sequential p50 of
live calls while a full-speed ``--projectors current`` job re-projects the store, over the
same p50 with no job running. Target: <= 1.5x.

One fleet as the Procfile runs it: a worker for live calls (``-Q tools,projections``, threads
c=8) and a worker for jobs (``-Q reprojections``, prefork c=2, ``worker_reprojections``), on
one host and one Redis. The store holds sealed runs of the example RAG tool (``search_docs``,
raw responses kept: ``bench.suite.fixtures.write_rag_runs``). Live calls are ``search_docs``
calls through ``ToolBoundary.invoke``, one at a time, as an agent loop makes them.

Each repetition is an idle block and a busy block of ``samples`` calls each, the order
flipping every repetition so that drift cancels. A busy block starts a job over the whole
store (default lanes, no rate), waits until every lane has done a chunk (full speed), makes
its calls and cancels the job, waiting until it has ended; a job that ends before the block
does is followed at once by another (``restarts``), so every busy call lies within a job. Per
repetition: busy p50 / idle p50 (and p95); the figure is their median with its spread, beside
the job's records/s during the busy blocks, the CPU each worker used, and the load average.

The knobs an operator has (``Knobs``): the job's lanes, rate and chunk, the jobs worker's
pool and its ``nice``. ``python -m bench.studies.live_during_job`` takes them as options;
``python -m bench --only b9`` measures the defaults.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.reports.stats import ms, percentile, spread
from bench.rig.workers import Pool, WorkerProcess, running
from bench.suite.config import bench_settings
from bench.suite.cpu import group_cpu_s
from bench.suite.fixtures import EXAMPLE_TOOLS, RAG_TOOL, ensure_scripts, write_rag_runs
from bench.suite.meta import load
from bench.suite.sides import CALL_TIMEOUT_S, call_ids
from boundary import RedisCanonicalStore, RunContext, ToolBoundary, ToolCallEnvelope
from boundary.registry import load_registry
from boundary.reprojection import Selection
from boundary.store.redis_jobs import RedisJobs
from tasks.settings import Settings
from tasks.wiring.app import (
    PROJECTIONS_QUEUE,
    REPROJECTIONS_QUEUE,
    TOOLS_QUEUE,
    configure,
    create_app,
)
from tasks.wiring.dispatcher import CeleryDispatcher
from tasks.worker.jobs import DEFAULT_CHUNK_RUNS, DEFAULT_LANES

#: Issue 40, item 6: live calls' sequential p50 during a full-speed job over idle, at most.
TARGET = 1.5
#: The live calls' arguments: a runbook search of three hits.
LIVE_ARGUMENTS: dict[str, Any] = {"query": "payments timeouts after deploy", "limit": 3}
#: The Procfile's workers: live calls on threads c=8, jobs on prefork c=2.
LIVE_POOL = Pool("threads", 8)
JOB_POOL = Pool("prefork", 2)
#: How often the busy block's watcher reads the job (to follow an ended job with the next).
WATCH_S = 0.05
#: Longest wait for a job's lanes to have done their first chunk, or to end once cancelled.
JOB_WAIT_S = 120.0
#: Live calls before the first block (the workers' first calls load the tool and its index).
WARMUP_CALLS = 20


@dataclass(frozen=True)
class Sizes:
    """How much the measurement does."""

    #: Sealed runs in the store, of ``calls`` calls each.
    runs: int
    calls: int
    #: Sequential live calls per block.
    samples: int
    #: Repetitions (an idle block and a busy block each).
    repeat: int


#: A default job does about 1,000-2,000 records/s on 2 shared cores: 50,000 records last
#: longer than a busy block of 200 calls, so the job rarely has to be started again.
FULL = Sizes(runs=5_000, calls=10, samples=200, repeat=5)
QUICK = Sizes(runs=300, calls=10, samples=30, repeat=2)


@dataclass(frozen=True)
class Knobs:
    """The job's options and the fleet's shape: what an operator can turn."""

    lanes: int = DEFAULT_LANES
    #: ``--rate N/PERIOD_S`` as (N, PERIOD_S); ``None``: full speed.
    rate: tuple[float, float] | None = None
    chunk: int = DEFAULT_CHUNK_RUNS
    live_pool: Pool = LIVE_POOL
    job_pool: Pool = JOB_POOL
    #: ``nice`` of the jobs worker's processes (0: as started).
    job_nice: int = 0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["live_pool"], out["job_pool"] = self.live_pool.label, self.job_pool.label
        return out


class LiveCalls:
    """``search_docs`` through ``ToolBoundary.invoke``, one call at a time."""

    def __init__(self, settings: Settings, store: RedisCanonicalStore) -> None:
        app = create_app(settings, name="bench_live")
        dispatcher = CeleryDispatcher(app, queues=(TOOLS_QUEUE, PROJECTIONS_QUEUE))
        self.boundary = ToolBoundary(
            store=store, registry=load_registry(EXAMPLE_TOOLS), dispatcher=dispatcher
        )
        self._ids = call_ids("b9-live", 1 << 62)

    def block(self, samples: int) -> list[float]:
        """Seconds of each of ``samples`` sequential calls (each must end READY)."""
        times = []
        for _ in range(samples):
            run_id, call_id = next(self._ids)
            run = RunContext(run_id=run_id, authorized_tools=frozenset({RAG_TOOL}))
            envelope = ToolCallEnvelope(
                run_id=run_id, tool_call_id=call_id, tool_name=RAG_TOOL, arguments=LIVE_ARGUMENTS
            )
            began = time.perf_counter()
            outcome = self.boundary.invoke(envelope, run, timeout=CALL_TIMEOUT_S)
            times.append(time.perf_counter() - began)
            if outcome.status != "READY":
                raise RuntimeError(f"live call failed: {outcome.error_code}")
        return times


@dataclass
class Relay:
    """Jobs over the whole store, one after another, while a busy block runs."""

    store: RedisCanonicalStore
    settings: Settings
    knobs: Knobs
    prefix: str
    jobs: RedisJobs = field(init=False)
    started: int = 0
    #: Records of the jobs that ended during the block, and of the current one at its start.
    done: int = 0
    current: str = ""

    def __post_init__(self) -> None:
        jobs = RedisJobs.of(self.store)
        assert jobs is not None
        self.jobs = jobs

    def start(self) -> None:
        from tasks.cli.jobs import start_job

        self.current = f"{self.prefix}-{self.started}"
        self.started += 1
        rate = list(self.knobs.rate) if self.knobs.rate else None
        start_job(
            self.store,
            self.settings,
            self.current,
            Selection(all=True),
            write=False,
            rate=rate,
            chunk=self.knobs.chunk,
            lanes=self.knobs.lanes,
        )

    def records(self) -> int:
        job = self.jobs.get(self.current)
        return self.done + (job.totals.get("records", 0) if job else 0)

    def await_full_speed(self) -> None:
        """Returns once every lane of the current job has done a chunk (or the job ended)."""
        deadline = time.monotonic() + JOB_WAIT_S
        while True:
            job = self.jobs.get(self.current)
            if job is None or not job.active or job.chunks >= job.lanes:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the job did not start: is the reprojections worker up?")
            time.sleep(WATCH_S)

    def follow_on(self) -> bool:
        """When the current job has ended, starts the next: whether it did."""
        job = self.jobs.get(self.current)
        if job is not None and job.active:
            return False
        self.done += job.totals.get("records", 0) if job else 0
        self.start()
        return True

    def stop(self) -> None:
        """Cancels the current job and returns once it has ended (no chunk runs on)."""
        from tasks.worker.chunk_slots import cancel

        cancel(self.store, self.jobs, self.current)
        deadline = time.monotonic() + JOB_WAIT_S
        while (job := self.jobs.get(self.current)) is not None and job.active:
            if time.monotonic() > deadline:
                raise RuntimeError("a cancelled job did not end")
            time.sleep(WATCH_S)


@contextmanager
def job_running(relay: Relay) -> Iterator[dict[str, Any]]:
    """A job at full speed for the whole block: on exit, what it did meanwhile (records/s,
    jobs started again)."""
    relay.start()
    relay.await_full_speed()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(WATCH_S):
            relay.follow_on()

    watcher = threading.Thread(target=watch, name="job-relay", daemon=True)
    got: dict[str, Any] = {}
    records, began = relay.records(), time.perf_counter()
    restarts = relay.started
    watcher.start()
    try:
        yield got
    finally:
        stop.set()
        watcher.join()
        seconds = time.perf_counter() - began
        got["records"] = relay.records() - records
        got["records_per_s"] = got["records"] / seconds
        got["restarts"] = relay.started - restarts
        relay.stop()
        # With the chunks that were at work when the block ended, which a cancel lets end and
        # counts: not a rate (they ran on past the block), but more than 0 whenever a chunk
        # ran during the block, however short the block was.
        got["records_by_end"] = relay.records() - records


def _p(values: list[float], q: float) -> float:
    return ms(percentile(values, q))


def measure(server_url: str, sizes: Sizes, knobs: Knobs, log_dir: Path) -> dict[str, Any]:
    """The whole study on the bench's DBs of ``server_url`` (flushed first): see the module
    docstring."""
    settings = bench_settings(server_url).model_copy(update={"tools": EXAMPLE_TOOLS})
    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=settings.ttl_s)
    for url in (settings.store_url, settings.broker, settings.backend):
        RedisCanonicalStore.from_url(url).client.flushdb()
    ensure_scripts(store)
    write_s = write_rag_runs(store, sizes.runs, sizes.calls, prefix="b9-run")
    app = configure(settings)  # the app start_job sends the job's chunks with
    fleet = [
        ("b9-live", knobs.live_pool, (TOOLS_QUEUE, PROJECTIONS_QUEUE)),
        ("b9-jobs", knobs.job_pool, (REPROJECTIONS_QUEUE,)),
    ]
    starts = [
        partial(
            WorkerProcess,
            module="tasks",
            name=name,
            app=app,
            settings=settings,
            pool=pool,
            queues=queues,
            log_dir=log_dir,
        )
        for name, pool, queues in fleet
    ]
    load_before = load()
    with running(*starts) as (live_worker, job_worker):
        if knobs.job_nice:
            # Every process of the group: the pool's children and the parent that forks more.
            os.setpriority(os.PRIO_PGRP, job_worker.pgid, knobs.job_nice)
        live = LiveCalls(settings, store)
        live.block(WARMUP_CALLS)
        relay = Relay(store, settings, knobs, prefix=f"b9-job-{int(time.time())}")
        reps = [
            _repetition(live, relay, sizes.samples, n % 2 == 1, (live_worker, job_worker))
            for n in range(sizes.repeat)
        ]
    ratios = [rep["p50_ratio"] for rep in reps]
    busy_rates = [rep["busy"]["job"]["records_per_s"] for rep in reps]
    return {
        "target": f"<= {TARGET:g}",
        "records": sizes.runs * sizes.calls,
        "sizes": asdict(sizes),
        "knobs": knobs.as_dict(),
        "write_s": write_s,
        "p50_ratio": spread(ratios),
        "p95_ratio": spread([rep["p95_ratio"] for rep in reps]),
        "idle_p50_ms": statistics.median(rep["idle"]["p50_ms"] for rep in reps),
        "busy_p50_ms": statistics.median(rep["busy"]["p50_ms"] for rep in reps),
        "job_records_per_s": spread(busy_rates),
        "restarts": sum(rep["busy"]["job"]["restarts"] for rep in reps),
        "met": statistics.median(ratios) <= TARGET,
        "load_before": load_before,
        "load_after": load(),
        "repetitions": reps,
    }


def _repetition(
    live: LiveCalls,
    relay: Relay,
    samples: int,
    busy_first: bool,
    workers: tuple[WorkerProcess, WorkerProcess],
) -> dict[str, Any]:
    out: dict[str, Any] = {"busy_first": busy_first}
    for busy in (busy_first, not busy_first):
        if busy:
            with job_running(relay) as job:
                out["busy"] = _block(live, samples, workers)
            out["busy"]["job"] = job
        else:
            out["idle"] = _block(live, samples, workers)
    out["p50_ratio"] = out["busy"]["p50_ms"] / out["idle"]["p50_ms"]
    out["p95_ratio"] = out["busy"]["p95_ms"] / out["idle"]["p95_ms"]
    return out


def _block(
    live: LiveCalls, samples: int, workers: tuple[WorkerProcess, WorkerProcess]
) -> dict[str, Any]:
    """``samples`` sequential live calls: their p50 and p95, and the cores each worker used
    meanwhile (its process group's CPU over the block's wall time)."""
    cpu = [group_cpu_s(worker.pgid) or 0.0 for worker in workers]
    began = time.perf_counter()
    times = live.block(samples)
    seconds = time.perf_counter() - began
    used = [(group_cpu_s(w.pgid) or 0.0) - c for w, c in zip(workers, cpu, strict=True)]
    return {
        "p50_ms": _p(times, 50),
        "p95_ms": _p(times, 95),
        "seconds": seconds,
        "live_worker_cores": used[0] / seconds,
        "job_worker_cores": used[1] / seconds,
        "load": load()[0],
    }
