"""``python -m bench.studies.onehop``: our worker sending the chained project task
(``TOOL_BOUNDARY_PROJECT_IN_LINE=false``, "ours" in the JSON) against our worker projecting in
line (``Settings.project_in_line``, the default: the project step run in line once the execute
step kept the raw response, the chained project task not sent: one broker hop a call instead
of two; "onehop" in the JSON). B1 in alternating pairs (calls in flight, sent then
awaited; worker and client CPU per call) and sequential calls alternating (p50, p99). Uses
DBs 3-5 of the server like ``python -m bench`` (flushed before and after, under its lock)."""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

from bench.reports.stats import spread
from bench.rig.workers import Pool, WorkerProcess, running
from bench.suite.b1_throughput import measure
from bench.suite.config import DEFAULT_REDIS_URL, bench_settings, parse_pools
from bench.suite.dbos_compare import sequential
from bench.suite.lock import exclusive
from bench.suite.meta import commit, load
from bench.suite.run import flush_own_dbs
from bench.suite.sides import Ours

ROOT = Path(__file__).resolve().parents[2]


class OneHop(Ours):
    """Ours, sent to queues of its own, whose worker projects in line."""

    name: str = "onehop"
    queues: tuple[str, str] = ("onehop_tools", "onehop_projections")


def compare(
    url: str, pool: Pool, calls: int, repetitions: int, samples: int, out: Path
) -> dict[str, Any]:
    settings = bench_settings(url, project_in_line=False)
    in_line = bench_settings(url, project_in_line=True)
    ours, hop = Ours(settings), OneHop(settings)

    def start(side: Ours) -> WorkerProcess:
        return WorkerProcess(
            module=side.module,
            name=side.name,
            app=side.app,
            settings=in_line if side is hop else settings,
            pool=pool,
            queues=side.queues,
            log_dir=out / "logs",
        )

    with running(partial(start, ours), partial(start, hop)) as started:
        pgids = {process.name: process.pgid for process in started}
        for side in (ours, hop):
            measure(side, 100, pgids[side.name])
        pairs = []
        for rep in range(repetitions):
            order = (ours, hop) if rep % 2 == 0 else (hop, ours)
            pairs.append({side.name: measure(side, calls, pgids[side.name]) for side in order})
        latency = sequential(hop, ours, samples, repetitions)
    got: dict[str, Any] = {"pool": pool.label, "calls": calls, "repetitions": repetitions}
    for name in ("ours", "onehop"):
        got[f"{name}_per_s"] = [pair[name].per_s for pair in pairs]
        got[f"{name}_worker_cpu_ms"] = [pair[name].worker_cpu_ms for pair in pairs]
        got[f"{name}_client_cpu_ms"] = [pair[name].client_cpu_ms for pair in pairs]
    got["throughput_ratio"] = spread([pair["onehop"].per_s / pair["ours"].per_s for pair in pairs])
    got["worker_cpu_ratio"] = spread(
        [(pair["ours"].worker_cpu_ms or 0) / (pair["onehop"].worker_cpu_ms or 1) for pair in pairs]
    )
    # ``sequential`` names its first side "ours": here that is the one-hop worker.
    got["sequential"] = {
        key.replace("ours_", "onehop_").replace("peer_", "ours_"): value
        for key, value in latency.items()
    }
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.onehop", description=__doc__)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--pools", type=parse_pools, default=(Pool("threads", 8),))
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repetitions", type=int, default=4)
    parser.add_argument("--samples", type=int, default=200, help="sequential calls a side")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "onehop")
    parser.add_argument("--lock-wait", type=float, default=900.0)
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    document: dict[str, Any] = {"command": " ".join(["python -m bench.studies.onehop", *given])}
    document |= {"commit": commit(), "load_before": load()}
    with exclusive(args.redis_url, args.lock_wait):
        flush_own_dbs(args.redis_url)
        try:
            document["pools"] = [
                compare(args.redis_url, pool, args.calls, args.repetitions, args.samples, args.out)
                for pool in args.pools
            ]
        finally:
            flush_own_dbs(args.redis_url)
    document["load_after"] = load()
    print(json.dumps(document, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
