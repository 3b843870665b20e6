"""B7: the async boundary on one event loop, through a real worker.

- **stall**: ``calls`` concurrent ``ainvoke`` calls while a 1 ms ticker runs. Reported: the
  ticker's lateness (wall time: p50, p99, worst), the longest single step the loop ran (CPU
  time of the loop's thread per callback: how long any code held the loop between two
  awaits), and the loop thread's CPU per tick (all the steps run between two ticks).
- **throughput**: the same ``calls`` through ``ainvoke`` on one loop, against ``invoke`` on
  ``threads`` threads, interleaved (the order flips every repetition).
- **precision**: ``outcome`` / ``aoutcome`` on an accepted call that stays PROJECTING, for
  waits of 0.05, 0.2 and 1 s: actual wait minus requested, p50 and p99 (the contract:
  within +50 ms).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from bench.event_loop import step_cpu_times, ticker
from bench.fixtures import create_noop
from bench.sides import ARGUMENTS, CALL_TIMEOUT_S, Ours, call_ids
from bench.stats import percentile
from bench.tools import NOOP
from boundary import CanonicalKey, RunContext, ToolCallEnvelope, ToolOutcome

T = TypeVar("T")

#: The ticker's period, seconds.
TICK_S = 0.001
#: Requested waits of the precision measurement, seconds.
WAITS_S = (0.05, 0.2, 1.0)


def _envelopes(prefix: str, count: int) -> list[tuple[ToolCallEnvelope, RunContext]]:
    calls = []
    for run_id, call_id in call_ids(prefix, count):
        run = RunContext(run_id=run_id, authorized_tools=frozenset({NOOP}))
        envelope = ToolCallEnvelope(
            run_id=run_id, tool_call_id=call_id, tool_name=NOOP, arguments=ARGUMENTS
        )
        calls.append((envelope, run))
    return calls


def _run(ours: Ours, body: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            return await body()
        finally:
            await ours.boundary.aclose()

    return asyncio.run(main())


def _check(outcomes: list[ToolOutcome]) -> None:
    failed = [o for o in outcomes if o.status != "READY"]
    if failed:
        raise RuntimeError(f"{len(failed)} calls not READY: {failed[0]}")


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": percentile(ordered, 50) * 1000,
        "p99_ms": percentile(ordered, 99) * 1000,
        "max_ms": ordered[-1] * 1000,
    }


def stall(ours: Ours, calls: int) -> dict[str, Any]:
    """``calls`` concurrent ``ainvoke`` while a 1 ms ticker measures the loop."""
    batch = _envelopes("b7-stall", calls)
    late: list[float] = []
    tick_cpu: list[float] = []

    async def body() -> tuple[float, list[ToolOutcome]]:
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop, TICK_S, late, tick_cpu))
        await asyncio.sleep(0.05)
        began = time.perf_counter()
        outcomes = await asyncio.gather(
            *(ours.boundary.ainvoke(e, r, timeout=CALL_TIMEOUT_S) for e, r in batch)
        )
        elapsed = time.perf_counter() - began
        stop.set()
        await ticking
        return elapsed, list(outcomes)

    with step_cpu_times() as steps:
        elapsed, outcomes = _run(ours, body)
    _check(outcomes)
    return {
        "calls": calls,
        "calls_per_s": calls / elapsed,
        "ticks": len(late),
        "tick_lateness": _ms(late),
        "longest_step_cpu_ms": max(steps) * 1000,
        "steps": len(steps),
        "tick_cpu": _ms(tick_cpu),
    }


def _async_rate(ours: Ours, calls: int) -> float:
    batch = _envelopes("b7-async", calls)

    async def body() -> float:
        began = time.perf_counter()
        outcomes = await asyncio.gather(
            *(ours.boundary.ainvoke(e, r, timeout=CALL_TIMEOUT_S) for e, r in batch)
        )
        _check(list(outcomes))
        return calls / (time.perf_counter() - began)

    return _run(ours, body)


def _sync_rate(ours: Ours, calls: int, threads: int) -> float:
    batch = _envelopes("b7-sync", calls)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        began = time.perf_counter()
        outcomes = list(
            pool.map(lambda c: ours.boundary.invoke(c[0], c[1], timeout=CALL_TIMEOUT_S), batch)
        )
        rate = calls / (time.perf_counter() - began)
    _check(outcomes)
    return rate


def throughput(ours: Ours, calls: int, threads: int, repetitions: int) -> dict[str, Any]:
    """``ainvoke`` on one loop against ``invoke`` on ``threads`` threads, interleaved."""
    async_rates, sync_rates = [], []
    for repetition in range(repetitions):
        if repetition % 2 == 0:
            async_rates.append(_async_rate(ours, calls))
            sync_rates.append(_sync_rate(ours, calls, threads))
        else:
            sync_rates.append(_sync_rate(ours, calls, threads))
            async_rates.append(_async_rate(ours, calls))
    ratios = [a / s for a, s in zip(async_rates, sync_rates, strict=True)]
    return {
        "calls": calls,
        "threads": threads,
        "async_per_s": async_rates,
        "sync_per_s": sync_rates,
        "ratio": {"median": statistics.median(ratios), "values": ratios},
    }


def _parked(ours: Ours) -> CanonicalKey:
    """An accepted call no worker will run: it stays PROJECTING for the whole measurement."""
    ((run_id, call_id),) = call_ids("b7-parked", 1)
    key = CanonicalKey(run_id=run_id, tool_call_id=call_id)
    create_noop(ours.store, key, request='{"query":"ping"}', reap_grace_s=60)
    return key


@contextmanager
def _gc_pauses() -> Iterator[list[float]]:
    """How long each garbage collection took (a pause of every thread), seconds."""
    pauses: list[float] = []
    began = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - began[0])

    gc.callbacks.append(timed)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(timed)


def precision(ours: Ours, samples: int) -> dict[str, Any]:
    """Actual minus requested wait of ``outcome`` and ``aoutcome`` on a PROJECTING call.
    The collector is not frozen here (a caller's waits meet it too); its longest pause during
    the waits is reported beside them."""
    key = _parked(ours)
    gc.collect()  # what the phases before left behind is not this phase's cost
    with _gc_pauses() as pauses:
        out = _precision(ours, key, samples)
    out["gc_pause_max_ms"] = max(pauses, default=0.0) * 1000
    return out


def _precision(ours: Ours, key: CanonicalKey, samples: int) -> dict[str, Any]:
    out: dict[str, Any] = {"samples": samples}
    for wait_s in WAITS_S:
        count = samples if wait_s < 1 else max(samples // 2, 1)
        sync = []
        for _ in range(count):
            began = time.perf_counter()
            outcome = ours.boundary.outcome(key.run_id, key.tool_call_id, timeout=wait_s)
            sync.append(time.perf_counter() - began - wait_s)
            assert outcome.pending

        async def body(wait_s: float = wait_s, count: int = count) -> list[float]:
            over = []
            for _ in range(count):
                began = time.perf_counter()
                outcome = await ours.boundary.aoutcome(key.run_id, key.tool_call_id, wait_s)
                over.append(time.perf_counter() - began - wait_s)
                assert outcome.pending
            return over

        out[f"{wait_s:g}"] = {"sync": _ms(sync), "async": _ms(_run(ours, body))}
    return out


def measure(ours: Ours, calls: int, threads: int, repetitions: int, samples: int) -> dict[str, Any]:
    return {
        "stall": stall(ours, calls),
        "throughput": throughput(ours, calls, threads, repetitions),
        "precision": precision(ours, samples),
    }
