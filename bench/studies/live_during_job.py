"""Live calls during a re-projection job (issue 40, item 6; ``bench.suite.b9_live_during_job``
measures it, ``python -m bench --only b9`` with the defaults): the sequential p50 of live
calls while a full-speed ``--projectors current`` job runs, over idle. Target: <= 1.5x.

``python -m bench.studies.live_during_job --redis-url redis://127.0.0.1:6379 [--runs N]
[--calls N] [--samples N] [--repeat N] [--quick] [--json]``, and the knobs an operator has:
``--lanes N``, ``--rate N/PERIOD_S``, ``--chunk N``, ``--job-pool prefork:1`` (the jobs
worker's pool), ``--job-nice 10`` (its processes' nice), ``--live-pool threads:8``. It
flushes the bench's DBs (3-5) of that server first.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.rig.workers import Pool
from bench.suite.b9_live_during_job import FULL, JOB_POOL, LIVE_POOL, QUICK, TARGET, Knobs, measure
from bench.suite.config import parse_pools
from tasks.worker.jobs import DEFAULT_CHUNK_RUNS, DEFAULT_LANES


def table(results: dict[str, Any]) -> str:
    """The figure in a few lines."""
    knobs, ratio = results["knobs"], results["p50_ratio"]
    rate = f"{knobs['rate'][0]:g}/{knobs['rate'][1]:g}s" if knobs["rate"] else "none"
    nice = f" nice {knobs['job_nice']}" if knobs["job_nice"] else ""
    lines = [
        f"Live calls during a re-projection job ({results['records']:,} records; jobs worker "
        f"{knobs['job_pool']}{nice}, lanes {knobs['lanes']}, rate {rate})",
        f"  live p50 busy / idle: {ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})"
        f", target <= {TARGET:g}: {'met' if results['met'] else 'missed'}",
        f"  p50 idle {results['idle_p50_ms']:.1f} ms, busy {results['busy_p50_ms']:.1f} ms; "
        f"p95 ratio {results['p95_ratio']['median']:.2f}",
        f"  job: {results['job_records_per_s']['median']:,.0f} records/s during the busy "
        f"blocks ({results['restarts']} jobs started again)",
        f"  load average {results['load_before']} before, {results['load_after']} after",
    ]
    for n, rep in enumerate(results["repetitions"]):
        idle, busy = rep["idle"], rep["busy"]
        lines.append(
            f"  rep {n + 1}: idle {idle['p50_ms']:.1f} ms, busy {busy['p50_ms']:.1f} ms "
            f"(x{rep['p50_ratio']:.2f}); job {busy['job']['records_per_s']:,.0f} rec/s, "
            f"{busy['job_worker_cores']:.2f} cores; live worker {idle['live_worker_cores']:.2f}"
            f"/{busy['live_worker_cores']:.2f} cores idle/busy; load {busy['load']}"
        )
    return "\n".join(lines)


def parse_rate(text: str | None) -> tuple[float, float] | None:
    """``N/PERIOD_S`` (records per period, seconds) -> (N, PERIOD_S)."""
    if not text:
        return None
    limit, _, period = text.partition("/")
    pair = (float(limit), float(period or 1))
    if pair[0] <= 0 or pair[1] <= 0:
        raise ValueError(f"not a rate: {text!r}")
    return pair


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The knobs an operator has, as options (``knobs_of`` reads them)."""
    parser.add_argument("--lanes", type=int, default=DEFAULT_LANES, help="the job's lanes")
    parser.add_argument("--rate", type=parse_rate, help="the job's --rate, N/PERIOD_S")
    parser.add_argument(
        "--chunk", type=int, default=DEFAULT_CHUNK_RUNS, help="runs per chunk of the job"
    )
    parser.add_argument(
        "--live-pool",
        default=None,
        help=f"live calls' worker, NAME:N (default {LIVE_POOL.name}:{LIVE_POOL.concurrency})",
    )
    parser.add_argument(
        "--job-pool",
        default=None,
        help=f"the jobs worker, NAME:N (default {JOB_POOL.name}:{JOB_POOL.concurrency})",
    )
    parser.add_argument("--job-nice", type=int, default=0, help="nice of the jobs worker")


def knobs_of(args: argparse.Namespace) -> Knobs:
    def pool(text: str | None, default: Pool) -> Pool:
        return parse_pools(text)[0] if text else default

    return Knobs(
        lanes=args.lanes,
        rate=args.rate,
        chunk=args.chunk,
        live_pool=pool(args.live_pool, LIVE_POOL),
        job_pool=pool(args.job_pool, JOB_POOL),
        job_nice=args.job_nice,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.live_during_job")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke)")
    parser.add_argument("--runs", type=int, help="sealed runs in the store")
    parser.add_argument("--calls", type=int, help="calls per run")
    parser.add_argument("--samples", type=int, help="live calls per block")
    parser.add_argument("--repeat", type=int, help="repetitions (an idle and a busy block)")
    parser.add_argument("--out", type=Path, default=Path("bench/out/live-during-job"))
    parser.add_argument("--json", action="store_true")
    add_arguments(parser)
    args = parser.parse_args(argv)
    given = {"runs": args.runs, "calls": args.calls, "samples": args.samples, "repeat": args.repeat}
    sizes = replace(QUICK if args.quick else FULL, **{k: v for k, v in given.items() if v})
    results = measure(args.redis_url, sizes, knobs_of(args), args.out / "logs")
    text = json.dumps(results, indent=2, sort_keys=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "live_during_job.json").write_text(text + "\n")
    print(text if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
