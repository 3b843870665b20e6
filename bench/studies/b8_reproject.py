"""B8: run projections at scale, through real workers. Three figures on one store:

- ``sealed``: facts from the sealed projections (``tasks.wiring.reproject.reproject``, the
  ``projections`` queue), runs per second;
- ``current``: re-projection of every record from its raw response with the example RAG
  projector (``tool-boundary reproject --projectors current``: a job on the ``reprojections``
  queue, dry run), records per second, streamed (the job pages the runs index; the lines are
  read as they come);
- ``count``: ``reproject --all --count`` on the runs index, seconds.

``python -m bench.studies.b8_reproject --redis-url redis://127.0.0.1:6379 [--runs N] [--calls N]
[--repeat N] [--json]``. It flushes the bench's DBs of that server first.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.rig.workers import Pool
from bench.suite import b5_reprocess
from bench.suite.config import bench_settings
from bench.suite.fixtures import EXAMPLE_TOOLS, ensure_scripts, write_rag_runs
from boundary import RedisCanonicalStore
from boundary.reprojection import Selection, count
from boundary.store import keys
from boundary.store.redis_jobs import RedisJobs
from tasks.settings import Settings
from tasks.wiring.app import PROJECTIONS_QUEUE, REPROJECTIONS_QUEUE, configure


def workers(settings: Settings, queue: str, pool: Pool, processes: int, log_dir: Path) -> Any:
    return b5_reprocess.workers(
        configure(settings), settings, queue, pool, processes, log_dir, name="b8"
    )


def sealed_facts(run_ids: list[str]) -> dict[str, Any]:
    """One pass of facts from sealed projections (B5's pass, on the process's app)."""
    elapsed, _, failed = b5_reprocess.one_pass(None, run_ids)
    lines = len(run_ids)
    return {"runs": lines, "failed": failed, "seconds": elapsed, "runs_per_s": lines / elapsed}


def current_job(store: RedisCanonicalStore, settings: Settings, job_id: str) -> dict[str, Any]:
    from tasks.cli.jobs import follow, start_job

    jobs = RedisJobs.of(store)
    assert jobs is not None
    began = time.perf_counter()
    start_job(
        store, settings, job_id, Selection(all=True), write=False, rate=None, chunk=100, lanes=2
    )
    sink = io.StringIO()
    job, lines, stalled = follow(jobs, job_id, sink, stall_s=120)
    elapsed = time.perf_counter() - began
    assert job is not None and not stalled, "the job did not end"
    records = job.totals.get("records", 0)
    return {
        "runs": job.totals.get("runs", 0),
        "records": records,
        "lines": lines,
        "changed": job.totals.get("records_changed", 0),
        "failed": job.totals.get("failed", 0),
        "seconds": elapsed,
        "records_per_s": records / elapsed,
    }


def count_at_scale(store: RedisCanonicalStore, records: int, calls: int, repeat: int) -> Any:
    """``--count`` on a store of ``records`` records in runs of ``calls``: only what it reads
    is written (each run in the runs index and its budget counters; no record), in pipelines.
    Seconds of each count, and what it counted."""
    client = store.client
    now_ms = int(store.now().timestamp() * 1000)
    ttl_ms = int(store.ttl_s * 1000)
    runs = records // calls
    pipe = client.pipeline(transaction=False)
    for r in range(runs):
        run_id = f"b8-count-{r}"
        pipe.zadd(keys.RUNS, {run_id: now_ms + ttl_ms - r % 1000})
        pipe.hset(keys.budget_key(run_id), mapping={"calls": calls, "sealed:READY": calls})
        pipe.pexpire(keys.budget_key(run_id), ttl_ms)
        if r % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    timings = []
    for _ in range(repeat):
        began = time.perf_counter()
        counted = count(client, Selection(all=True), now_ms=now_ms, ttl_ms=ttl_ms)
        timings.append(time.perf_counter() - began)
    return counted | {"seconds": median_of(timings)}


def median_of(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.b8_reproject")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2, help="worker processes per phase")
    parser.add_argument(
        "--pool",
        default="threads:4",
        help="each worker's pool and concurrency, NAME:N (prefork:2: one worker, two processes)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/b8"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--count-records",
        type=int,
        default=0,
        help="also time --count on a store of this many records (index and counters only)",
    )
    args = parser.parse_args(argv)

    settings = bench_settings(args.redis_url).model_copy(update={"tools": EXAMPLE_TOOLS})
    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=settings.ttl_s)
    for url in (settings.store_url, settings.broker, settings.backend):
        # ASYNC: a synchronous FLUSHDB of a million records outlasts the socket timeout.
        RedisCanonicalStore.from_url(url).client.flushdb(asynchronous=True)
    ensure_scripts(store)
    write_s = write_rag_runs(store, args.runs, args.calls)
    run_ids = [f"b8-run-{r}" for r in range(args.runs)]
    print(f"B8: wrote {args.runs:,} runs of {args.calls} calls in {write_s:.1f}s", file=sys.stderr)
    results: dict[str, Any] = {"runs": args.runs, "calls_per_run": args.calls, "write_s": write_s}

    now_ms = int(store.now().timestamp() * 1000)
    timings = []
    for _ in range(args.repeat):
        began = time.perf_counter()
        counted = count(
            store.client, Selection(all=True), now_ms=now_ms, ttl_ms=int(settings.ttl_s * 1000)
        )
        timings.append(time.perf_counter() - began)
    results["count"] = counted | {"seconds": median_of(timings)}

    name, _, concurrency = args.pool.partition(":")
    threads = Pool(name, int(concurrency or 1))
    with workers(settings, PROJECTIONS_QUEUE, threads, args.processes, args.out / "logs"):
        sealed = [sealed_facts(run_ids) for _ in range(args.repeat)]
    results["sealed"] = {
        "workers": f"{args.processes} x {threads.label}",
        "runs_per_s": median_of([s["runs_per_s"] for s in sealed]),
        "failed": sum(s["failed"] for s in sealed),
    }
    print(f"B8 sealed: {results['sealed']['runs_per_s']}", file=sys.stderr)

    with workers(settings, REPROJECTIONS_QUEUE, threads, args.processes, args.out / "logs"):
        current = [current_job(store, settings, f"b8-{n}-{now_ms}") for n in range(args.repeat)]
    results["current"] = {
        "workers": f"{args.processes} x {threads.label}",
        "records_per_s": median_of([c["records_per_s"] for c in current]),
        "records": current[0]["records"],
        "lines": current[0]["lines"],
        "changed": current[0]["changed"],
        "failed": current[0]["failed"],
    }
    print(f"B8 current: {results['current']['records_per_s']}", file=sys.stderr)
    if args.count_records:
        results["count_at_scale"] = count_at_scale(
            store, args.count_records, args.calls, args.repeat
        )
        print(f"B8 count at scale: {results['count_at_scale']}", file=sys.stderr)
    text = json.dumps(results, indent=2, sort_keys=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "b8.json").write_text(text + "\n")
    print(text if args.json else _table(results))
    return 0


def _table(results: dict[str, Any]) -> str:
    sealed, current = results["sealed"], results["current"]
    return "\n".join(
        [
            f"B8 on {results['runs']:,} runs of {results['calls_per_run']} calls",
            f"  facts from sealed projections: {sealed['runs_per_s']['median']:,.0f} runs/s "
            f"({sealed['workers']})",
            f"  re-projection (current, dry run): {current['records_per_s']['median']:,.0f} "
            f"records/s ({current['workers']})",
            f"  --count: {results['count']['seconds']['median']:.3f}s "
            f"({results['count']['records']:,} records)",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
