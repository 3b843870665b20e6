"""The README's tables of ``--peers dbos`` runs (``python -m bench.reports.readme``'s ``dbos`` and
``spreads`` blocks): ours against DBOS per run, and how far each run's ratios can be
trusted."""

from __future__ import annotations

from typing import Any, Protocol

from bench.reports.stats import NOISY_SPREAD


class _Run(Protocol):
    path: str

    @property
    def results(self) -> dict[str, Any]: ...


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def _head(*names: str) -> list[str]:
    return ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]


def _pair_spread(figure: dict[str, Any]) -> str:
    """``median (min-max)`` of a ratio over its pairs, ``noisy`` past the bound."""
    median, low, high = figure["median"], figure["min"], figure["max"]
    text = f"**{_num(median)}** ({_num(low)}-{_num(high)})"
    noisy = (high - low) / abs(median) > NOISY_SPREAD if median else True
    return f"{text} noisy" if noisy else text


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _cpu(samples: list[dict[str, Any]]) -> str:
    """Median worker + client + server CPU ms per call over the samples."""
    parts = [
        _median([s[name] for s in samples if s.get(name) is not None] or [float("nan")])
        for name in ("worker_cpu_ms", "client_cpu_ms", "server_cpu_ms")
    ]
    return f"{_num(sum(parts))} ({' + '.join(_num(p) for p in parts)})"


def dbos_table(runs: list[_Run]) -> str:
    """Per run, pool and DBOS side: throughput (ours / DBOS per pair, both rates), the
    sequential call's p50 and p99 and the send's p50, and CPU per call (worker + client +
    server: Redis for ours, the database's PostgreSQL backends for DBOS)."""
    lines = _head(
        "file",
        "pool",
        "DBOS side",
        "throughput ours / DBOS (pairs)",
        "calls/s ours, DBOS",
        "call p50 ours / DBOS (blocks)",
        "call p50, p99 ms ours; DBOS",
        "send p50 ms ours, DBOS",
        "CPU ms a call ours (worker + client + Redis)",
        "CPU ms a call DBOS (worker + client + PostgreSQL)",
    )
    for run in runs:
        for label, pool in run.results.get("dbos", {}).items():
            for name, side in pool["sides"].items():
                rate, seq = side["throughput"], side["sequential"]
                lines.append(
                    f"| `{run.path}` | {label} | {name} ({pool['polling_s'][name]:g} s) | "
                    f"{_pair_spread(rate['ratio'])} | {_num(_median(rate['ours_per_s']))}, "
                    f"{_num(_median(rate['peer_per_s']))} | "
                    f"{_pair_spread(seq['call_p50_ratio'])} | "
                    f"{_num(seq['ours_call_p50_ms'])}, {_num(seq['ours_call_p99_ms'])}; "
                    f"{_num(seq['peer_call_p50_ms'])}, {_num(seq['peer_call_p99_ms'])} | "
                    f"{_num(seq['ours_submit_p50_ms'])}, {_num(seq['peer_submit_p50_ms'])} | "
                    f"{_cpu(rate['ours'])} | {_cpu(rate['peer'])} |"
                )
    return "\n".join(lines)


def spreads_table(runs: list[_Run]) -> str:
    """Per run and pool: each ratio against the fair peer over its pairs, with the CPU ratio
    beside B1's (it moves far less with the machine), and what others kept busy."""
    lines = _head(
        "file",
        "pool",
        "B1 ours / fair (pairs)",
        "B1 CPU fair / ours (pairs)",
        "B2 call p50 ours / fair (blocks)",
        "B2 submit / apply_async p50 (blocks)",
        "others kept busy (median, max)",
    )
    for run in runs:
        b2 = run.results.get("b2", {})
        for label, b1 in run.results.get("b1", {}).items():
            latency = b2.get(label, {})
            busy = b1.get("others_busy")
            lines.append(
                f"| `{run.path}` | {label} | {_pair_spread(b1['ratio'])} | "
                f"{_pair_spread(b1['cpu_ratio'])} | "
                + " | ".join(
                    _pair_spread(latency[f"{name}_pairs"]) if f"{name}_pairs" in latency else "-"
                    for name in ("call_over_bare_call_p50", "submit_over_apply_async_p50")
                )
                + " | "
                + (f"{busy['median']:.0%}, {busy['max']:.0%}" if busy and busy.get("n") else "-")
                + " |"
            )
    return "\n".join(lines)
