"""B7: the async boundary on one event loop, through a real worker.

- **stall**: ``calls`` concurrent ``ainvoke`` calls while a 1 ms ticker runs. Reported: the
  ticker's lateness (wall time: p50, p99, worst), the longest single step the loop ran (CPU
  time of the loop's thread per callback: how long any code held the loop between two
  awaits), and the loop thread's CPU per tick (all the steps run between two ticks).
  Measured at each of several in-flight counts (60, 200, 1,000); at the largest, also the
  process's peak RSS growth and its peak open sockets and clients of the Redis server
  (sampled from a thread every ``SAMPLE_S``). The smallest count is then run ``runs`` times
  more: how many of those runs stay under ``REPEAT_BOUND_MS`` of worst lateness.
- **throughput**: the same ``calls`` through ``ainvoke`` on one loop, against ``invoke`` on
  ``threads`` threads, interleaved (the order flips every repetition).
- **precision**: ``outcome`` / ``aoutcome`` on an accepted call that stays PROJECTING, for
  waits of 0.05, 0.2 and 1 s: actual wait minus requested, p50 and p99 (the contract:
  within +50 ms).
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from bench.peers.tools import NOOP
from bench.reports.stats import percentile
from bench.suite.event_loop import step_cpu_times, ticker
from bench.suite.fixtures import create_noop
from bench.suite.sides import ARGUMENTS, CALL_TIMEOUT_S, Ours, call_ids
from boundary import CanonicalKey, RunContext, ToolCallEnvelope, ToolOutcome

if TYPE_CHECKING:
    import redis

T = TypeVar("T")

#: The ticker's period, seconds.
TICK_S = 0.001
#: Requested waits of the precision measurement, seconds.
WAITS_S = (0.05, 0.2, 1.0)
#: In-flight counts of the stall measurement (the issue's: 60, 200 and 1,000).
STALL_CALLS = (60, 200, 1000)
#: The repeated stall run: its worst tick lateness is compared with this bound, ms.
REPEAT_BOUND_MS = 50.0
#: Period of the resource sampler (peak RSS, sockets, Redis clients), seconds.
SAMPLE_S = 0.02


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


def _status_kib(field: str) -> int | None:
    """A ``/proc/self/status`` figure in KiB (VmRSS, VmHWM), or None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _sockets() -> int | None:
    """Sockets this process holds open now (``/proc/self/fd``), or None off Linux."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    count = 0
    for name in names:
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
        except OSError:
            continue  # closed meanwhile
    return count


def _reset_peak_rss() -> bool:
    """Resets the kernel's peak RSS of this process (VmHWM) to its current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return False
    return True


class _Sampler:
    """Samples the process's open sockets and the Redis server's clients from a thread of
    its own (the loop's lateness is the measurement: nothing of this runs on the loop), and
    reads the peak RSS growth over the sampled span."""

    def __init__(self, server: redis.Redis | None) -> None:
        self._server = server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="b7-sampler", daemon=True)
        self.sockets: list[int] = []
        self.clients: list[int] = []
        self._rss_before = 0
        self._peak_reset = False

    def __enter__(self) -> _Sampler:
        self._peak_reset = _reset_peak_rss()
        self._rss_before = _status_kib("VmRSS") or 0
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._hwm = _status_kib("VmHWM")

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            sockets = _sockets()
            if sockets is not None:
                self.sockets.append(sockets)
            if self._server is not None:
                try:
                    # Less this sampler's own connection.
                    self.clients.append(len(self._server.client_list()) - 1)
                except Exception:
                    self._server = None

    def figures(self, before_sockets: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"sample_s": SAMPLE_S}
        if self._peak_reset and self._hwm is not None:
            out["rss_peak_growth_mib"] = (self._hwm - self._rss_before) / 1024
            out["rss_measure"] = "VmHWM after minus VmRSS before, peak reset (clear_refs 5)"
        if self.sockets:
            out["sockets_before"] = before_sockets
            out["sockets_peak"] = max(self.sockets)
        if self.clients:
            out["redis_clients_peak"] = max(self.clients)
        return out


def stall(
    ours: Ours, calls: int, *, resources: bool = False, server: redis.Redis | None = None
) -> dict[str, Any]:
    """``calls`` concurrent ``ainvoke`` while a 1 ms ticker measures the loop; with
    ``resources``, the process's memory and connections meanwhile (``server``: the Redis
    server whose ``CLIENT LIST`` is sampled)."""
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

    sampled: dict[str, Any] = {}
    sockets_before = _sockets() if resources else None
    with step_cpu_times() as steps:
        if resources:
            with _Sampler(server) as sampler:
                elapsed, outcomes = _run(ours, body)
            sampled = sampler.figures(sockets_before)
        else:
            elapsed, outcomes = _run(ours, body)
    _check(outcomes)
    out = {
        "calls": calls,
        "calls_per_s": calls / elapsed,
        "ticks": len(late),
        "tick_lateness": _ms(late),
        "longest_step_cpu_ms": max(steps) * 1000,
        "steps": len(steps),
        # All the loop's steps (the ticker's too) over the calls: the loop's CPU per call.
        "loop_cpu_ms_per_call": sum(steps) * 1000 / calls,
        "tick_cpu": _ms(tick_cpu),
    }
    if resources:
        out["resources"] = sampled
    return out


def stalls(
    ours: Ours,
    levels: tuple[int, ...],
    runs: int,
    server: redis.Redis | None = None,
) -> dict[str, Any]:
    """The stall at each in-flight count of ``levels`` (resources at the largest), then the
    smallest count ``runs`` times more: its worst lateness per run against
    ``REPEAT_BOUND_MS``."""
    levels = tuple(sorted(levels))
    largest = levels[-1]
    measured = [stall(ours, calls, resources=calls == largest, server=server) for calls in levels]
    repeat_calls = min(levels)
    worst, longest = [], []
    for _ in range(runs):
        got = stall(ours, repeat_calls)
        worst.append(got["tick_lateness"]["max_ms"])
        longest.append(got["longest_step_cpu_ms"])
    return {
        "levels": measured,
        "repeat": {
            "calls": repeat_calls,
            "runs": runs,
            "bound_ms": REPEAT_BOUND_MS,
            "under_bound": sum(1 for w in worst if w < REPEAT_BOUND_MS),
            "worst_ms": worst,
            "longest_step_cpu_ms": longest,
        },
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


def measure(
    ours: Ours,
    calls: int,
    threads: int,
    repetitions: int,
    samples: int,
    *,
    levels: tuple[int, ...] = STALL_CALLS,
    runs: int = 10,
    server: redis.Redis | None = None,
) -> dict[str, Any]:
    """``stall`` is the largest level's (as before the levels, for the older tables)."""
    measured = stalls(ours, levels, runs, server) if levels else None
    return {
        "stall": measured["levels"][-1] if measured else stall(ours, calls),
        **({"stalls": measured} if measured else {}),
        "throughput": throughput(ours, calls, threads, repetitions),
        "precision": precision(ours, samples),
    }
