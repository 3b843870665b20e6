"""One side of the flow-control benchmark (``bench/studies/flow.py``), run as a script in a tree of
the project (``PYTHONPATH`` names the tree: this file runs against the code before flow control
too, so it uses only the public API both have). Settings come from ``TOOL_BOUNDARY_*``.

    python bench/studies/flow_driver.py throughput --calls 1000 --threads 8
    python bench/studies/flow_driver.py submit --tool noop --calls 300
    python bench/studies/flow_driver.py handoff --tool one_at_a_time --waiting 50
    python bench/studies/flow_driver.py rate --tool rated --seconds 60

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from boundary import CanonicalKey, InvocationStatus, RunContext, ToolCallEnvelope
from tasks import CeleryDispatcher, app
from tasks.runtime import get_runtime


def _boundary() -> Any:
    return get_runtime().boundary(CeleryDispatcher(app))


def _run(name: str, tool: str) -> RunContext:
    return RunContext(run_id=name, authorized_tools=frozenset({tool}))


def _call(run: RunContext, tool: str, n: int, **arguments: Any) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=run.run_id, tool_call_id=f"c{n}", tool_name=tool, arguments=arguments
    )


def _wait_all(boundary: Any, run: RunContext, calls: int, timeout: float = 600) -> None:
    for n in range(calls):
        outcome = boundary.outcome(run.run_id, f"c{n}", timeout=timeout)
        if outcome.status is not InvocationStatus.READY:
            raise SystemExit(f"call c{n} ended {outcome.status} {outcome.error_code}")


def _warm(boundary: Any, tool: str) -> None:
    run = _run(f"warm-{time.time_ns()}", tool)
    for n in range(20):
        boundary.submit(_call(run, tool, n), run)
    _wait_all(boundary, run, 20, timeout=120)


def throughput(calls: int, threads: int, tool: str) -> dict[str, Any]:
    """Calls/s end to end: ``calls`` submitted from ``threads`` threads, all outcomes read."""
    boundary = _boundary()
    _warm(boundary, tool)
    run = _run(f"tp-{time.time_ns()}", tool)
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda n: boundary.submit(_call(run, tool, n), run), range(calls)))
    _wait_all(boundary, run, calls)
    elapsed = time.perf_counter() - started
    return {"calls": calls, "elapsed_s": elapsed, "calls_per_s": calls / elapsed}


def submit(calls: int, tool: str) -> dict[str, Any]:
    """Sequential ``submit`` times (each call ended before the next, so a limited tool's slot
    is always free), and a Redis PING's round trip on the same store for scale."""
    boundary = _boundary()
    _warm(boundary, tool)
    run = _run(f"sub-{time.time_ns()}", tool)
    times = []
    for n in range(calls):
        begun = time.perf_counter()
        boundary.submit(_call(run, tool, n), run)
        times.append(time.perf_counter() - begun)
        boundary.outcome(run.run_id, f"c{n}", timeout=60)
    client = boundary.store.client
    pings = []
    for _ in range(200):
        begun = time.perf_counter()
        client.ping()
        pings.append(time.perf_counter() - begun)
    return {
        "submit_p50_ms": statistics.median(times) * 1000,
        "submit_p99_ms": sorted(times)[int(len(times) * 0.99) - 1] * 1000,
        "ping_p50_ms": statistics.median(pings) * 1000,
    }


def handoff(waiting: int, tool: str) -> dict[str, Any]:
    """A one-at-a-time tool with ``waiting`` calls in line: from each call's seal (its
    record's last update) to the next one's start (its ``started_at``), both on the store's
    clock (ms)."""
    boundary = _boundary()
    _warm(boundary, tool)
    run = _run(f"ho-{time.time_ns()}", tool)
    for n in range(waiting + 1):
        boundary.submit(_call(run, tool, n), run)
    _wait_all(boundary, run, waiting + 1)
    store = boundary.store
    records = [
        store.get(CanonicalKey(run_id=run.run_id, tool_call_id=f"c{n}")) for n in range(waiting + 1)
    ]
    ordered = sorted((r for r in records if r and r.started_at), key=lambda r: r.started_at)
    gaps = [
        (later.started_at - earlier.updated_at).total_seconds() * 1000
        for earlier, later in itertools.pairwise(ordered)
    ]
    gaps.sort()
    return {
        "waiting": waiting,
        "handoffs": len(gaps),
        "p50_ms": statistics.median(gaps),
        "p99_ms": gaps[max(int(len(gaps) * 0.99) - 1, 0)],
        "max_ms": gaps[-1],
    }


def rate(seconds: float, tool: str, limit: int) -> dict[str, Any]:
    """Offered load above the tool's rate limit for ``seconds``: starts per second of the
    store's clock, as each call's tool saw its start (``bench.studies.flow_tools.noted``)."""
    from bench.studies.flow_tools import STARTS_KEY

    boundary = _boundary()
    store = boundary.store
    store.client.delete(STARTS_KEY)
    run = _run(f"rate-{time.time_ns()}", tool)
    offered = int(limit * (seconds + 5) * 1.5)
    for n in range(offered):
        boundary.submit(_call(run, tool, n), run)
    give_up = time.monotonic() + seconds * 3 + 60
    while time.monotonic() < give_up:
        starts = [int(v) for v in store.client.lrange(STARTS_KEY, 0, -1)]
        if starts and store.now().timestamp() * 1000 > min(starts) + seconds * 1000 + 1500:
            break
        time.sleep(0.5)
    boundary.close_run(run.run_id)  # the calls left wait in line: taken out of it
    first = min(starts)
    window = sorted(at for at in starts if at < first + seconds * 1000)
    per_second: dict[int, int] = {}
    for at in window:
        per_second[(at - first) // 1000] = per_second.get((at - first) // 1000, 0) + 1
    worst = max(
        (sum(1 for b in window[i:] if b - a < 1000) for i, a in enumerate(window)), default=0
    )
    return {
        "seconds": seconds,
        "offered": offered,
        "started": len(window),
        "expected": limit * seconds,
        "per_second_max": max(per_second.values()),
        "per_second_min": min(per_second.values()),
        "worst_sliding_second": worst,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=["throughput", "submit", "handoff", "rate"])
    parser.add_argument("--tool", default="noop")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--waiting", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--limit", type=int, default=20)
    args = parser.parse_args()
    if args.what == "throughput":
        result = throughput(args.calls, args.threads, args.tool)
    elif args.what == "submit":
        result = submit(args.calls, args.tool)
    elif args.what == "handoff":
        result = handoff(args.waiting, args.tool)
    else:
        result = rate(args.seconds, args.tool, args.limit)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
