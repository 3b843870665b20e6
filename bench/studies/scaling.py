"""``python -m bench.studies.scaling``: ours with 1, 2, 4 worker processes against one Redis.

Each count starts that many ``celery -A tasks worker -P threads -c C`` processes (each its own
node, all on our two queues), warms them up, then measures B1 (``--calls`` in flight from
this one client process, sent then awaited) ``--repetitions`` times: calls/s, and per call
the CPU of all workers together, of this client and of the Redis server. Counts are measured
in turns, round after round (1, 2, 4, then 4, 2, 1, ...), each round starting its workers
anew, so a count is not favoured by when it ran. ``--profile`` also records every worker of
each count with py-spy during one more measurement (``bench.suite.profiling``), for where a
worker's CPU goes as processes are added.

Uses DBs 3-5 of the server like ``python -m bench`` (flushed before and after, under its
lock).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from bench.rig.workers import Pool, WorkerProcess, running
from bench.suite.b1_throughput import warm_up
from bench.suite.config import DEFAULT_REDIS_URL, add_projection_argument, bench_settings
from bench.suite.cpu import group_cpu_s, own_cpu_s, server_cpu_s
from bench.suite.lock import exclusive
from bench.suite.meta import commit, load
from bench.suite.run import flush_own_dbs
from bench.suite.sides import Ours, call_ids

ROOT = Path(__file__).resolve().parents[2]


def _workers_cpu_s(pgids: list[int]) -> float:
    return sum(group_cpu_s(pgid) or 0.0 for pgid in pgids)


def measure(ours: Ours, pgids: list[int], calls: int, server: Any) -> dict[str, float]:
    """One B1 measurement of ``calls`` in flight, CPU summed over the workers ``pgids``."""
    ids = list(call_ids("scale", calls))
    server_before, workers_before, client_before = (
        server_cpu_s(server),
        _workers_cpu_s(pgids),
        own_cpu_s(),
    )
    began = time.perf_counter()
    handles = [ours.send(run_id, call_id) for run_id, call_id in ids]
    for handle in handles:
        ours.wait(handle)
    seconds = time.perf_counter() - began
    server_after, workers_after, client_after = (
        server_cpu_s(server),
        _workers_cpu_s(pgids),
        own_cpu_s(),
    )
    return {
        "calls_per_s": calls / seconds,
        "worker_cpu_ms": (workers_after - workers_before) * 1000 / calls,
        "client_cpu_ms": (client_after - client_before) * 1000 / calls,
        "redis_cpu_ms": ((server_after or 0.0) - (server_before or 0.0)) * 1000 / calls,
    }


def _record(command: list[str]) -> subprocess.Popen[bytes]:
    """A py-spy recorder, its chatter kept off this command's JSON output."""
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _profile(pgids: list[int], out: Path, measure_once: Any) -> list[dict[str, Any]]:
    from bench.suite.profiling import PY_SPY_RATE, py_spy, summarize_speedscope

    binary = py_spy()
    if binary is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    recorders = []
    for n, pgid in enumerate(pgids):
        target = out / f"py-spy-worker{n}.speedscope.json"
        command = [binary, "record", "--pid", str(pgid), "--subprocesses", "--nonblocking"]
        command += ["--gil", "--rate", str(PY_SPY_RATE), "--format", "speedscope"]
        recorders.append((target, _record([*command, "--output", str(target)])))
    try:
        time.sleep(1.0)
        measure_once()
    finally:
        for _, recorder in recorders:
            recorder.send_signal(signal.SIGINT)
        for _, recorder in recorders:
            recorder.wait(timeout=60)
    summaries = []
    for target, _ in recorders:
        if target.exists():
            summary = summarize_speedscope(target, top=15)
            summaries.append({"file": str(target), **summary})
    return summaries


def one_count(
    ours: Ours, count: int, pool: Pool, args: argparse.Namespace, server: Any
) -> list[dict[str, float]]:
    """Starts ``count`` workers, warms them, measures; stops them."""
    starts = [
        (
            lambda n=n: WorkerProcess(
                module=ours.module,
                name=f"ours{n}",
                app=ours.app,
                settings=_settings(args),
                pool=pool,
                queues=ours.queues,
                log_dir=args.out / "logs",
            )
        )
        for n in range(count)
    ]
    with running(*starts) as started:
        pgids = [process.pgid for process in started]
        warm_up(ours, args.warmup, pgids[0])
        samples = [measure(ours, pgids, args.calls, server) for _ in range(args.repetitions)]
        if args.profile:
            out = args.out / f"profile-{count}workers"
            profile = _profile(pgids, out, lambda: measure(ours, pgids, args.calls, server))
            samples[-1]["profiles"] = profile  # type: ignore[assignment]
    return samples


def _settings(args: argparse.Namespace) -> Any:
    return bench_settings(args.redis_url, project_in_line=args.project_in_line)


def summarize(counts: dict[int, list[dict[str, float]]]) -> list[dict[str, Any]]:
    rows = []
    base = None
    for count in sorted(counts):
        samples = counts[count]
        row: dict[str, Any] = {"workers": count, "samples": len(samples)}
        for name in ("calls_per_s", "worker_cpu_ms", "client_cpu_ms", "redis_cpu_ms"):
            values = [s[name] for s in samples]
            row[name] = statistics.median(values)
            row[f"{name}_min"], row[f"{name}_max"] = min(values), max(values)
        if base is None:
            base = row["calls_per_s"]
        row["over_one_worker"] = row["calls_per_s"] / base
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.scaling", description=__doc__)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--workers", default="1,2,4", help="worker process counts")
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    parser.add_argument("--calls", type=int, default=1000, help="calls in flight")
    parser.add_argument("--repetitions", type=int, default=3, help="measurements per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the counts")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--profile", action="store_true", help="py-spy every worker")
    add_projection_argument(parser)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "scaling")
    parser.add_argument("--lock-wait", type=float, default=900.0)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.workers.split(",")]
    pool = Pool("threads", args.concurrency)
    given = sys.argv[1:] if argv is None else argv
    out: dict[str, Any] = {"command": " ".join(["python -m bench.studies.scaling", *given])}
    out["commit"] = commit()
    out["load_before"] = load()
    got: dict[int, list[dict[str, float]]] = {count: [] for count in counts}
    with exclusive(args.redis_url, args.lock_wait):
        flush_own_dbs(args.redis_url)
        try:
            ours = Ours(bench_settings(args.redis_url))
            server = redis.Redis.from_url(args.redis_url)
            for round_no in range(args.rounds):
                order = counts if round_no % 2 == 0 else counts[::-1]
                for count in order:
                    got[count] += one_count(ours, count, pool, args, server)
        finally:
            flush_own_dbs(args.redis_url)
    out["load_after"] = load()
    out["rows"] = summarize(got)
    out["samples"] = {str(count): samples for count, samples in got.items()}
    print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
