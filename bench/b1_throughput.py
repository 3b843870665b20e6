"""B1: end-to-end throughput of N calls in flight at once, ours against bare chains.

All N are sent, then every outcome is awaited, from one client thread; the same for bare
chains (``apply_async`` all, then ``.get`` all). Repetitions alternate which side goes first.
Beside wall-clock throughput, the CPU each call cost the worker and the client is measured
(``/proc``): on a shared machine it varies far less than throughput.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.cpu import group_cpu_s, own_cpu_s
from bench.sides import Side, call_ids
from bench.stats import spread


@dataclass(frozen=True)
class Sample:
    calls: int
    seconds: float
    #: CPU milliseconds per call of the worker's processes, and of this client process.
    worker_cpu_ms: float | None
    client_cpu_ms: float

    @property
    def per_s(self) -> float:
        return self.calls / self.seconds


def measure(side: Side, calls: int, worker_pgid: int) -> Sample:
    """Sends ``calls`` calls, then waits for every outcome."""
    ids = list(call_ids(f"b1{side.name}", calls))
    worker_before, client_before = group_cpu_s(worker_pgid), own_cpu_s()
    began = time.perf_counter()
    handles = [side.send(run_id, call_id) for run_id, call_id in ids]
    for handle in handles:
        side.wait(handle)
    seconds = time.perf_counter() - began
    worker_after, client_after = group_cpu_s(worker_pgid), own_cpu_s()
    worker_ms = (
        None
        if worker_before is None or worker_after is None
        else (worker_after - worker_before) * 1000 / calls
    )
    return Sample(calls, seconds, worker_ms, (client_after - client_before) * 1000 / calls)


def compare(
    ours: Side, bare: Side, pgids: dict[str, int], calls: int, repetitions: int
) -> dict[str, Any]:
    """``repetitions`` pairs (ours, bare), alternating the order; ratios per pair."""
    pairs: list[tuple[Sample, Sample]] = []
    for rep in range(repetitions):
        order = (ours, bare) if rep % 2 == 0 else (bare, ours)
        got = {side.name: measure(side, calls, pgids[side.name]) for side in order}
        pairs.append((got[ours.name], got[bare.name]))
    ratios = [o.per_s / b.per_s for o, b in pairs]
    cpu_ratios = []
    for o, b in pairs:
        ours_cpu, bare_cpu = _total_cpu(o), _total_cpu(b)
        if ours_cpu is not None and bare_cpu is not None:
            cpu_ratios.append(bare_cpu / ours_cpu)
    return {
        "calls": calls,
        "repetitions": repetitions,
        "ours_per_s": [o.per_s for o, _ in pairs],
        "bare_per_s": [b.per_s for _, b in pairs],
        "ratios": ratios,
        "ratio": spread(ratios),
        "ours": [asdict(o) for o, _ in pairs],
        "bare": [asdict(b) for _, b in pairs],
        # Bare CPU per call over ours: the throughput ratio a CPU-bound machine would give.
        "cpu_ratios": cpu_ratios,
        "cpu_ratio": spread(cpu_ratios),
    }


def _total_cpu(sample: Sample) -> float | None:
    if sample.worker_cpu_ms is None:
        return None
    return sample.worker_cpu_ms + sample.client_cpu_ms


def warm_up(side: Side, calls: int, worker_pgid: int) -> None:
    """Imports, connections and pools of client and worker, before anything is timed."""
    measure(side, calls, worker_pgid)
