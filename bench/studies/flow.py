"""``python -m bench.studies.flow``: what fleet flow control costs and how it hands slots on (issue
31's figure set), against a real Redis, real ``celery worker`` processes (threads, -c 8).

- **unlimited**: B1-style throughput of a tool without limits, this tree against the tree
  before flow control (``--before``, a git ref checked out in a temporary worktree), in
  alternating pairs in one run: the ratio of each pair, their median and spread.
- **submit**: a sequential ``submit`` of a limited tool with a free slot against one of the
  same tool without limits, and a PING's round trip on the same Redis (the target: at most
  one round trip more).
- **handoff**: a one-at-a-time tool with N calls in line: from each seal to the next call's
  start, on the store's clock (p50, p99), for each N of ``--waiting``.
- **rate**: ``RateLimit(20, 1.0)`` under ``--rate-seconds`` of offered load: starts per
  second of the store's clock, and the total against 20 x seconds.

The report goes to stdout (and ``--json`` writes it whole).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench.rig.workers import celery_command, start_process, stop_group, worker_args
from bench.suite.meta import commit

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "bench" / "studies" / "flow_driver.py"
#: The commit before flow control (issue 31's "before").
DEFAULT_BEFORE = "669050c"
#: A spread (max-min over the median) past this makes a ratio "noisy".
NOISY = 0.10
#: The DBs of the store, broker and result backend (as ``python -m bench``).
DBS = (3, 4, 5)


def _env(tree: Path, redis_url: str, tools: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    store, broker, backend = (f"{redis_url}/{db}" for db in DBS)
    env |= {
        "PYTHONPATH": str(tree),
        "TOOL_BOUNDARY_REDIS_URL": store,
        "TOOL_BOUNDARY_BROKER_URL": broker,
        "TOOL_BOUNDARY_RESULT_BACKEND": backend,
        "TOOL_BOUNDARY_TOOLS": tools,
        "C_FORCE_ROOT": "1",
    }
    return env


def _flush(redis_url: str) -> None:
    for db in DBS:
        redis.Redis.from_url(f"{redis_url}/{db}").flushdb()


@contextmanager
def worker(tree: Path, redis_url: str, tools: str, logs: Path) -> Iterator[None]:
    """A threads worker (-c 8) of ``tree``, stopped when the block ends."""
    _flush(redis_url)
    args = worker_args("threads", 8, ("tools", "projections"), level="WARNING")
    log = logs / f"worker-{time.time_ns()}.log"
    proc = start_process(
        celery_command("tasks", *args), _env(tree, redis_url, tools), log, cwd=tree
    )
    try:
        yield
    finally:
        stop_group(proc, timeout_s=20)


def drive(tree: Path, redis_url: str, tools: str, *args: str) -> dict[str, Any]:
    """Runs ``flow_driver.py`` against ``tree``'s code; its JSON answer."""
    done = subprocess.run(
        [sys.executable, str(DRIVER), *args],
        cwd=tree,
        env=_env(tree, redis_url, tools),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"driver {args} failed:\n{done.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@contextmanager
def before_tree(ref: str) -> Iterator[Path]:
    """The project at ``ref``, checked out in a temporary worktree."""
    path = Path(tempfile.mkdtemp(prefix="tb-flow-before-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(path), ref],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(path)],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )


def spread(values: list[float]) -> dict[str, Any]:
    median = statistics.median(values)
    width = (max(values) - min(values)) / median if median else 0.0
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "values": values,
        "noisy": width > NOISY,
    }


def unlimited(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    ratios, ours, theirs = [], [], []
    with before_tree(args.before) as old:
        sides = {
            "after": (ROOT, "bench.studies.flow_tools:registry"),
            "before": (old, "bench.tools:registry"),
        }
        for pair in range(args.pairs):
            order = ("after", "before") if pair % 2 == 0 else ("before", "after")
            rates: dict[str, float] = {}
            for side in order:
                tree, tools = sides[side]
                with worker(tree, args.redis_url, tools, logs):
                    rates[side] = drive(
                        tree, args.redis_url, tools, "throughput", "--calls", str(args.calls)
                    )["calls_per_s"]
            ours.append(rates["after"])
            theirs.append(rates["before"])
            ratios.append(rates["after"] / rates["before"])
            print(
                f"  pair {pair + 1}: after {rates['after']:.0f}/s, before "
                f"{rates['before']:.0f}/s, ratio {ratios[-1]:.3f}",
                flush=True,
            )
    return {"ratio": spread(ratios), "after_calls_per_s": ours, "before_calls_per_s": theirs}


def submit_cost(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    tools = "bench.studies.flow_tools:registry"
    with worker(ROOT, args.redis_url, tools, logs):
        plain = drive(ROOT, args.redis_url, tools, "submit", "--tool", "noop", "--calls", "300")
        limited = drive(
            ROOT, args.redis_url, tools, "submit", "--tool", "limited", "--calls", "300"
        )
    extra = limited["submit_p50_ms"] - plain["submit_p50_ms"]
    return {
        "unlimited": plain,
        "limited": limited,
        "extra_p50_ms": extra,
        "extra_in_round_trips": extra / plain["ping_p50_ms"],
    }


def handoffs(args: argparse.Namespace, logs: Path) -> list[dict[str, Any]]:
    tools = "bench.studies.flow_tools:registry"
    found = []
    for waiting in args.waiting:
        with worker(ROOT, args.redis_url, tools, logs):
            found.append(
                drive(
                    ROOT,
                    args.redis_url,
                    tools,
                    "handoff",
                    "--tool",
                    "one_at_a_time",
                    "--waiting",
                    str(waiting),
                )
            )
        print(
            f"  {waiting} waiting: p50 {found[-1]['p50_ms']:.1f} ms, p99 "
            f"{found[-1]['p99_ms']:.1f} ms",
            flush=True,
        )
    return found


def rate(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    tools = "bench.studies.flow_tools:registry"
    with worker(ROOT, args.redis_url, tools, logs):
        found = drive(
            ROOT,
            args.redis_url,
            tools,
            "rate",
            "--tool",
            "rated",
            "--seconds",
            str(args.rate_seconds),
            "--limit",
            "20",
        )
    found["total_off_by"] = found["started"] / found["expected"] - 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379",
        help="Redis server (no DB); the bench flushes and uses DBs 3, 4, 5",
    )
    parser.add_argument(
        "--before",
        default=DEFAULT_BEFORE,
        help="git ref of the code before flow control (default %(default)s)",
    )
    parser.add_argument(
        "--only", default="unlimited,submit,handoff,rate", help="phases, e.g. unlimited,submit"
    )
    parser.add_argument("--pairs", type=int, default=5, help="unlimited: alternating pairs")
    parser.add_argument("--calls", type=int, default=1000, help="unlimited: calls a side")
    parser.add_argument("--waiting", default="50,500", help="handoff: calls in line, e.g. 50,500")
    parser.add_argument(
        "--rate-seconds", type=float, default=60.0, help="rate: seconds of offered load"
    )
    parser.add_argument("--json", help="write the whole report to this file")
    args = parser.parse_args()
    args.redis_url = args.redis_url.rstrip("/")
    args.waiting = [int(n) for n in args.waiting.split(",") if n]
    phases = set(args.only.split(","))
    report: dict[str, Any] = {
        "command": "python -m bench.studies.flow " + " ".join(sys.argv[1:]),
        "commit": commit(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_before": os.getloadavg(),
    }
    logs = Path(tempfile.mkdtemp(prefix="tb-flow-bench-"))
    runners = {"unlimited": unlimited, "submit": submit_cost, "handoff": handoffs, "rate": rate}
    for name, run in runners.items():
        if name in phases:
            print(f"{name}:", flush=True)
            report[name] = run(args, logs)
            print(f"  {json.dumps(report[name], default=str)[:400]}", flush=True)
    report["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
