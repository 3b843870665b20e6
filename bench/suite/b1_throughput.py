"""B1: end-to-end throughput of N calls in flight at once, ours against bare chains.

All N are sent, then every outcome is awaited, from one client thread; the same for the
peers' chains (``apply_async`` all, then wait on each project task). Repetitions alternate
which side goes first.
Beside wall-clock throughput, the CPU each call cost the worker, the client and the Redis
server is measured (``/proc``, ``INFO cpu``), with the worker's context switches per call:
on a shared machine they vary far less than throughput.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.reports.stats import spread
from bench.suite.cpu import group_cpu_s, group_switches, machine_cpu_s, own_cpu_s, server_cpu_s
from bench.suite.sides import Side, call_ids


@dataclass(frozen=True)
class Sample:
    calls: int
    seconds: float
    #: CPU milliseconds per call of the worker's processes, and of this client process.
    worker_cpu_ms: float | None
    client_cpu_ms: float
    #: CPU milliseconds per call of the Redis server (broker, backend and store).
    redis_cpu_ms: float | None = None
    #: Context switches per call of the worker's threads.
    worker_switches: float | None = None
    #: Share of the machine's cores busy with anything but this measurement (other sides'
    #: idle workers, other users' processes, steal) while it ran: what makes a pair noisy.
    others_busy: float | None = None

    @property
    def per_s(self) -> float:
        return self.calls / self.seconds


def _per_call(before: float | None, after: float | None, calls: int, scale: float) -> float | None:
    return None if before is None or after is None else (after - before) * scale / calls


def measure(side: Side, calls: int, worker_pgid: int, server: Any = None) -> Sample:
    """Sends ``calls`` calls, then waits for every outcome. ``server``: a client of the
    Redis server, whose CPU is then measured too."""
    ids = list(call_ids(f"b1{side.name}", calls))
    server_before = None if server is None else server_cpu_s(server)
    switches_before = group_switches(worker_pgid)
    machine_before = machine_cpu_s()
    worker_before, client_before = group_cpu_s(worker_pgid), own_cpu_s()
    began = time.perf_counter()
    handles = [side.send(run_id, call_id) for run_id, call_id in ids]
    for handle in handles:
        side.wait(handle)
    seconds = time.perf_counter() - began
    worker_after, client_after = group_cpu_s(worker_pgid), own_cpu_s()
    machine_after = machine_cpu_s()
    switches_after = group_switches(worker_pgid)
    server_after = None if server is None else server_cpu_s(server)
    others = _others_busy(
        machine_after - machine_before if machine_before and machine_after else None,
        [
            _delta(worker_before, worker_after),
            client_after - client_before,
            _delta(server_before, server_after),
        ],
        seconds,
    )
    return Sample(
        calls,
        seconds,
        _per_call(worker_before, worker_after, calls, 1000),
        (client_after - client_before) * 1000 / calls,
        redis_cpu_ms=_per_call(server_before, server_after, calls, 1000),
        worker_switches=_per_call(switches_before, switches_after, calls, 1),
        others_busy=others,
    )


def _delta(before: float | None, after: float | None) -> float:
    return 0.0 if before is None or after is None else after - before


def _others_busy(machine_s: float | None, ours_s: list[float], seconds: float) -> float | None:
    """The machine's busy CPU not spent by the measured worker, client or server, as a share
    of every core's time over ``seconds``."""
    cores = os.cpu_count() or 1
    if machine_s is None or seconds <= 0:
        return None
    return max(0.0, machine_s - sum(ours_s)) / (seconds * cores)


def compare(
    ours: Side,
    peers: list[Side],
    pgids: dict[str, int],
    calls: int,
    repetitions: int,
    server: Any = None,
) -> dict[str, Any]:
    """``repetitions`` rounds of every side; even rounds run ours first, odd rounds last (the
    peers in reverse), so each pair shares the machine's noise both ways round.

    ``ratio`` is ours over the first peer (the fair one); ``<peer>_ratio`` over each other.
    ``cpu_ratio``: the peer's worker + client CPU per call over ours; ``system_cpu_ratio``
    adds the Redis server's (with ``server``, a client of it).
    """
    sides = [ours, *peers]
    rounds: list[dict[str, Sample]] = []
    orders: list[list[str]] = []
    for rep in range(repetitions):
        order = sides if rep % 2 == 0 else sides[::-1]
        orders.append([side.name for side in order])
        rounds.append({side.name: measure(side, calls, pgids[side.name], server) for side in order})
    out: dict[str, Any] = {"calls": calls, "repetitions": repetitions, "orders": orders}
    for side in sides:
        out[f"{side.name}_per_s"] = [r[side.name].per_s for r in rounds]
        out[side.name] = [asdict(r[side.name]) for r in rounds]
    busy = [r[side.name].others_busy for r in rounds for side in sides]
    out["others_busy"] = spread([b for b in busy if b is not None])
    for n, peer in enumerate(peers):
        prefix = "" if n == 0 else f"{peer.name}_"
        ratios = [r[ours.name].per_s / r[peer.name].per_s for r in rounds]
        out[f"{prefix}ratios"] = ratios
        out[f"{prefix}ratio"] = spread(ratios)
        for name, with_server in (("cpu", False), ("system_cpu", True)):
            # Peer CPU per call over ours: the throughput ratio a CPU-bound machine gives.
            cpu_ratios = []
            for r in rounds:
                ours_cpu = _total_cpu(r[ours.name], with_server)
                peer_cpu = _total_cpu(r[peer.name], with_server)
                if ours_cpu is not None and peer_cpu is not None:
                    cpu_ratios.append(peer_cpu / ours_cpu)
            out[f"{prefix}{name}_ratios"] = cpu_ratios
            out[f"{prefix}{name}_ratio"] = spread(cpu_ratios)
    return out


def _total_cpu(sample: Sample, with_server: bool = False) -> float | None:
    if sample.worker_cpu_ms is None:
        return None
    total = sample.worker_cpu_ms + sample.client_cpu_ms
    if not with_server:
        return total
    return None if sample.redis_cpu_ms is None else total + sample.redis_cpu_ms


def warm_up(side: Side, calls: int, worker_pgid: int) -> None:
    """Imports, connections and pools of client and worker, before anything is timed."""
    measure(side, calls, worker_pgid)
