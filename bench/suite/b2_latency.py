"""B2: how long the synchronous part of a call takes (``submit``: preflight, create, dispatch)
against a Redis PING and against a bare chain's ``apply_async``.

Calls go one at a time, as an agent loop makes them: ping, submit, wait; ping, apply_async,
wait (each peer). The waits give the sequential end-to-end latency of every side too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import permutations
from typing import Any

from bench.reports.stats import ms, percentile, spread
from bench.suite.sides import Ours, Side, call_ids
from boundary.preflight import Accepted, preflight


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    value = action()
    return time.perf_counter() - began, value


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, values in samples.items():
        out[f"{name}_p50_ms"] = ms(percentile(values, 50))
        out[f"{name}_p99_ms"] = ms(percentile(values, 99))
    return out


def _call(side: Side, run_id: str, tool_call_id: str) -> tuple[float, float]:
    """Seconds to send one call, and to send it and have its outcome."""
    began = time.perf_counter()
    handle = side.send(run_id, tool_call_id)
    sent = time.perf_counter() - began
    side.wait(handle)
    return sent, time.perf_counter() - began


#: Per side: the name of its send time and of its sequential call time.
_NAMES = {
    "ours": ("submit", "call"),
    "bare": ("apply_async", "bare_call"),
    "defaults": ("defaults_apply_async", "defaults_call"),
    "bare_one": ("bare_one_apply_async", "bare_one_call"),
    "bare_spaced": ("bare_spaced_apply_async", "bare_spaced_call"),
}


#: Ratios of B2 taken per block of samples (ours over the fair peer): (name, ours, peer).
BLOCK_RATIOS = (
    ("submit_over_apply_async_p50", "submit", "apply_async"),
    ("call_over_bare_call_p50", "call", "bare_call"),
    ("call_over_bare_one_call_p50", "call", "bare_one_call"),
    # Like for like: the same chain with our worker's event spacing.
    ("call_over_bare_spaced_call_p50", "call", "bare_spaced_call"),
)


def block_ratios(ours: list[float], peer: list[float], blocks: int) -> list[float]:
    """The p50 ratio in each of ``blocks`` consecutive blocks of paired samples: the same
    ratio taken ``blocks`` times, so its spread shows how far one measurement can be
    trusted."""
    size = max(1, min(len(ours), len(peer)) // max(1, blocks))
    return [
        percentile(ours[start : start + size], 50) / percentile(peer[start : start + size], 50)
        for start in range(0, min(len(ours), len(peer)) - size + 1, size)
    ]


def latencies(ours: Ours, peers: list[Side], samples: int, blocks: int = 1) -> dict[str, Any]:
    """p50/p99 of PING, submit, the peers' apply_async and every side's sequential call, with
    ratios over all samples and, per ``BLOCK_RATIOS``, in ``blocks`` blocks (``<name>_pairs``:
    median and spread). Each sample takes every side in turn, each call after a PING, in an
    order that cycles through every permutation of the sides: each side follows each other
    side, and is first and last, equally often (a call right after another side's call
    shares the CPU with that side's worker still acking and sending events)."""
    ping = ours.store.client.ping
    sides: list[Side] = [ours, *peers]
    times: dict[str, list[float]] = {"ping": []}
    for side in sides:
        for name in _NAMES[side.name]:
            times[name] = []
    ids = {side.name: call_ids(f"b2{side.name}", samples) for side in sides}
    orders = list(permutations(sides))
    for n in range(samples):
        for side in orders[n % len(orders)]:
            times["ping"].append(_timed(ping)[0])
            sent, total = _call(side, *next(ids[side.name]))
            send_name, call_name = _NAMES[side.name]
            times[send_name].append(sent)
            times[call_name].append(total)
    out: dict[str, Any] = {"samples": samples, **_summary(times)}
    for q in ("p50", "p99"):
        submit = out[f"submit_{q}_ms"]
        out[f"submit_over_ping_{q}"] = submit / out[f"ping_{q}_ms"]
        out[f"submit_over_apply_async_{q}"] = submit / out[f"apply_async_{q}_ms"]
        out[f"call_over_bare_call_{q}"] = out[f"call_{q}_ms"] / out[f"bare_call_{q}_ms"]
        if "defaults_call" in times:
            out[f"call_over_defaults_call_{q}"] = out[f"call_{q}_ms"] / out[f"defaults_call_{q}_ms"]
            out[f"submit_over_defaults_apply_async_{q}"] = (
                submit / out[f"defaults_apply_async_{q}_ms"]
            )
        for peer in ("bare_one", "bare_spaced"):
            if f"{peer}_call" in times:
                out[f"call_over_{peer}_call_{q}"] = out[f"call_{q}_ms"] / out[f"{peer}_call_{q}_ms"]
    for name, mine, theirs in BLOCK_RATIOS:
        if theirs not in times:
            continue
        ratios = block_ratios(times[mine], times[theirs], blocks)
        out[f"{name}_pairs"] = {"ratios": ratios, **spread(ratios)}
    # What the boundary adds to the synchronous part, in PING round trips.
    out["added_over_ping_p50"] = (out["submit_p50_ms"] - out["apply_async_p50_ms"]) / out[
        "ping_p50_ms"
    ]
    return out


def submit_parts(ours: Ours, samples: int) -> dict[str, float]:
    """Where ``submit``'s time goes: preflight, the create script, the dispatch (chain
    building and kombu publish), timed apart for the same calls (p50, ms)."""
    boundary = ours.boundary
    parts: dict[str, list[float]] = {"preflight": [], "create": [], "dispatch": []}
    for run_id, call_id in call_ids("b2parts", samples):
        run = ours.run(run_id)
        envelope = ours.envelope(run_id, call_id)
        now = datetime.now(UTC)
        began = time.perf_counter()
        checked = preflight(envelope, run, boundary.registry, boundary.store.limits, now)
        preflighted = time.perf_counter()
        assert isinstance(checked, Accepted)
        boundary.store.create(
            checked.key,
            tool_name=checked.spec.name,
            request=checked.request,
            deadline=None,
            max_pending_s=boundary.max_pending_s,
            reap_grace_s=boundary.reap_grace_s,
            max_run_calls=None,
            max_tool_calls=None,
        )
        created = time.perf_counter()
        boundary.dispatcher.dispatch(checked.key)
        dispatched = time.perf_counter()
        parts["preflight"].append(preflighted - began)
        parts["create"].append(created - preflighted)
        parts["dispatch"].append(dispatched - created)
        ours.wait((run_id, call_id))
    return {f"{name}_p50_ms": ms(percentile(values, 50)) for name, values in parts.items()}
