"""B1 with the boundary's telemetry off, on the OpenTelemetry API without an SDK (the
default: no-op), and on the SDK exporting to nothing, in one run:

    python -m bench.studies.telemetry_cost [--calls 200] [--repetitions 3] [--redis-url URL]

Three copies of our worker (threads pool, ``bench.studies.telemetry_worker``), one per mode, each on
queues of its own; the client switches its own telemetry to the same mode before each side's
calls (``boundary.telemetry.configure``). Rounds alternate the order of the sides (B1's
``compare``). Reported: each mode's throughput over "off", per round and as a spread, and the
worker + client CPU per call, which varies far less than throughput on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

from bench.reports.stats import spread
from bench.rig.workers import Pool, WorkerProcess, running
from bench.studies.otel_sdk import sdk_providers
from bench.suite import b1_throughput
from bench.suite.config import bench_settings
from bench.suite.lock import exclusive
from bench.suite.run import flush_own_dbs, log, reachable
from bench.suite.sides import Ours
from boundary import telemetry

MODES = ("off", "noop", "sdk")
POOL = Pool("threads", 8)


class Traced(Ours):
    """Ours, with the client's and its worker's telemetry in one mode."""

    module = "bench.studies.telemetry_worker"
    _current: str | None = None
    _sdk: tuple[Any, Any] | None = None

    def __init__(self, mode: str, *args: Any, **kwargs: Any) -> None:
        self.name = mode
        self.queues = (f"tel_{mode}_tools", f"tel_{mode}_projections")
        super().__init__(*args, **kwargs)

    def send(self, run_id: str, tool_call_id: str) -> tuple[str, str]:
        if Traced._current != self.name:
            _client_mode(self.name)
        return super().send(run_id, tool_call_id)


def _client_mode(mode: str) -> None:
    if mode == "off":
        telemetry.configure(enabled=False)
    elif mode == "noop":
        telemetry.configure()
    else:
        if Traced._sdk is None:
            Traced._sdk = sdk_providers()
        tracer_provider, meter_provider = Traced._sdk
        telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    Traced._current = mode


def measure(
    redis_url: str, calls: int, repetitions: int, log_dir: Path, order: tuple[str, ...] = MODES
) -> dict[str, Any]:
    settings = bench_settings(redis_url)
    sides = [Traced(mode, settings) for mode in order]

    def start(side: Traced) -> WorkerProcess:
        # The worker's mode: settings_env passes this process's environment on.
        os.environ["BENCH_TELEMETRY"] = side.name
        return WorkerProcess(
            module=side.module,
            name=side.name,
            app=side.app,
            settings=settings,
            pool=POOL,
            queues=side.queues,
            log_dir=log_dir,
        )

    with running(*[partial(start, side) for side in sides]) as started:
        pgids = {process.name: process.pgid for process in started}
        for side in sides:
            b1_throughput.warm_up(side, min(calls, 50), pgids[side.name])
        got = b1_throughput.compare(sides[0], sides[1:], pgids, calls, repetitions)
    per_s = {mode: got[f"{mode}_per_s"] for mode in MODES}
    out: dict[str, Any] = {"pool": POOL.label, "calls": calls, "repetitions": repetitions}
    for mode in ("noop", "sdk"):
        ratios = [m / o for m, o in zip(per_s[mode], per_s["off"], strict=True)]
        out[f"{mode}_over_off"] = {"ratios": ratios, **spread(ratios)}
        cpu = [
            (s["worker_cpu_ms"] + s["client_cpu_ms"]) / (o["worker_cpu_ms"] + o["client_cpu_ms"])
            for s, o in zip(got[mode], got["off"], strict=True)
            if s["worker_cpu_ms"] is not None and o["worker_cpu_ms"] is not None
        ]
        out[f"{mode}_cpu_over_off"] = {"ratios": cpu, **spread(cpu)}
    out["per_s"] = per_s
    out["orders"] = got["orders"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.studies.telemetry_cost", description=__doc__
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--order", default=",".join(MODES), help="the sides' order in even rounds (odd: reversed)"
    )
    args = parser.parse_args(argv)
    if not reachable(args.redis_url):
        print(f"bench: Redis is not reachable at {args.redis_url}", file=sys.stderr)
        return 2
    with exclusive(args.redis_url, 600, lambda: log("waiting for another run")):
        flush_own_dbs(args.redis_url)
        try:
            log(f"telemetry cost: B1 {args.repetitions} x {args.calls} calls a mode")
            order = tuple(args.order.split(","))
            result = measure(args.redis_url, args.calls, args.repetitions, args.out / "logs", order)
        finally:
            flush_own_dbs(args.redis_url)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
