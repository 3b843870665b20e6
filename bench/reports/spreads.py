"""Each headline ratio with its spread over the alternating pairs it is the median of
(``spreads``), and the DBOS comparison's figures (``dbos_figures``), for
``bench.reports.report``."""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.reports.stats import NOISY_SPREAD


def _first(section: dict[str, Any], pool: str | None = None) -> dict[str, Any] | None:
    for entry in section.values():
        if pool is None or entry.get("pool") == pool:
            return entry  # type: ignore[no-any-return]
    return None


def noise(figure: dict[str, Any]) -> dict[str, Any]:
    """A ratio's median, min and max with its relative spread and ``noisy`` flag (computed
    here too for runs written before ``bench.reports.stats.spread`` gave them)."""
    median, low, high = figure["median"], figure["min"], figure["max"]
    relative = (high - low) / abs(median) if median else math.inf
    return {
        "median": median,
        "min": low,
        "max": high,
        "n": figure.get("n", len(figure.get("ratios", ())) or None),
        "spread": relative,
        "noisy": relative > NOISY_SPREAD,
    }


def spreads(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each headline ratio (named as in ``figures``) with its spread over the alternating
    pairs it is the median of."""
    out: dict[str, dict[str, Any]] = {}
    for kind in ("threads", "prefork"):
        b1 = _first(results.get("b1", {}), kind)
        if b1 is None:
            continue
        for name in ("ratio", "cpu_ratio", "defaults_ratio", "system_cpu_ratio", "inline_ratio"):
            if isinstance(b1.get(name), dict):
                out[f"b1_{kind}_{name}"] = noise(b1[name])
    b2 = _first(results.get("b2", {}))
    if b2 is not None:
        for name in ("call_over_bare_call_p50", "submit_over_apply_async_p50"):
            if f"{name}_pairs" in b2:
                out[f"b2_{name}"] = noise(b2[f"{name}_pairs"])
    if "b9" in results:
        out["b9_live_p50_ratio"] = noise(results["b9"]["p50_ratio"])
    dbos = _first(results.get("dbos", {}))
    if dbos is not None:
        for side, got in dbos["sides"].items():
            out[f"{side}_ratio"] = noise(got["throughput"]["ratio"])
            for name in ("call_p50_ratio", "submit_p50_ratio"):
                out[f"{side}_{name}"] = noise(got["sequential"][name])
    return out


def dbos_figures(dbos: dict[str, Any]) -> dict[str, Any]:
    """Per DBOS side (``dbos``, ``dbos_defaults``), on the first pool it was measured on:
    ours / DBOS ratios (throughput, sequential p50s) and both sides' own figures."""
    out: dict[str, Any] = {"dbos_pool": f"{dbos['pool']} c={dbos['concurrency']}"}
    for name, side in dbos["sides"].items():
        rate, seq = side["throughput"], side["sequential"]
        out[f"{name}_ratio"] = rate["ratio"]["median"]
        out[f"{name}_ours_per_s"] = statistics.median(rate["ours_per_s"])
        out[f"{name}_per_s"] = statistics.median(rate["peer_per_s"])
        out[f"{name}_call_p50_ratio"] = seq["call_p50_ratio"]["median"]
        out[f"{name}_submit_p50_ratio"] = seq["submit_p50_ratio"]["median"]
        for side_key, prefix in (("ours", f"{name}_ours"), ("peer", name)):
            for what in ("call_p50_ms", "call_p99_ms", "submit_p50_ms"):
                out[f"{prefix}_{what}"] = seq[f"{side_key}_{what}"]
    return out
