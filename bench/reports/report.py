"""The run's outputs: headline figures and targets, ``bench.json``, ``b1_b2.png`` and
``report.md`` in the output directory, and a table on stdout."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.reports.spreads import dbos_figures, spreads
from bench.reports.stats import quoted

#: (figure, comparison, bound, what the issue asks), as issue 26 closed on (quoted by the
#: README's older sets, ``python -m bench.reports.readme``'s ``targets`` tables).
ISSUE_26_TARGETS: tuple[tuple[str, str, float, str], ...] = (
    ("b1_threads_ratio", ">=", 0.9, "B1 throughput vs the fair peer, threads pool"),
    ("b1_prefork_ratio", ">=", 0.9, "B1 throughput vs the fair peer, prefork pool"),
    ("b2_call_over_bare_call_p50", "<=", 1.2, "B2 sequential call vs the fair peer (p50)"),
    ("b2_submit_over_apply_async_p50", "<=", 1.0, "B2 submit vs the peer's apply_async (p50)"),
    ("b3_store_commands_per_call", "<=", 6.0, "B3 store commands per call"),
    ("b4_round_trips", "<=", 2.0, "B4 observe on a 100-call run, round trips"),
    ("b5_runs_per_s", ">=", 1000.0, "B5 batch reprocessing, runs per second"),
    ("b7_200_tick_lateness_max_ms", "<", 20.0, "B7 worst tick lateness, 200 in flight, ms"),
    (
        "b7_60_runs_under_50_ms",
        ">=",
        10,
        "B7 60 in flight: runs (of 10) with worst tick lateness < 50 ms",
    ),
)

#: The targets a run is judged by now: issue 35's bounds against the fair peer and DBOS, and
#: issue 40's bound on live calls during a re-projection job (B9).
TARGETS: tuple[tuple[str, str, float, str], ...] = (
    ("b1_threads_ratio", ">=", 0.95, "B1 throughput vs the fair peer, threads pool"),
    ("b1_prefork_ratio", ">=", 0.95, "B1 throughput vs the fair peer, prefork pool"),
    ("b2_call_over_bare_call_p50", "<=", 1.1, "B2 sequential call vs the fair peer (p50)"),
    *ISSUE_26_TARGETS[3:6],
    # Issue 53: B5 on the reprocessing workers, like for like, a turn's latency.
    ("b5_runs_per_s", ">=", 5000.0, "B5 facts from sealed projections, runs per second"),
    *ISSUE_26_TARGETS[7:],
    ("b1_threads_bare_spaced_ratio", ">=", 0.95, "B1 like for like (peer events spaced), threads"),
    ("b1_prefork_bare_spaced_ratio", ">=", 0.95, "B1 like for like (peer events spaced), prefork"),
    ("b2_call_over_bare_spaced_call_p50", "<=", 1.1, "B2 sequential call, like for like (p50)"),
    ("dbos_ratio", ">=", 1.5, "throughput vs DBOS, 10 ms polling (--peers dbos)"),
    ("dbos_call_p50_ratio", "<=", 0.25, "sequential call p50 vs DBOS, 10 ms polling"),
    # Issue 40, item 6.
    ("b9_live_p50_ratio", "<=", 1.5, "B9 live call p50 during a full-speed job / idle"),
)


#: The same bounds against the one-task peer (``bench.suite.sides.BareOne``): not the issue's, but
#: what a call projected in line (our default) costs over bare Celery running the same call as
#: one task, where the fair peer runs it as a two-task chain.
ONE_TASK_TARGETS: tuple[tuple[str, str, float, str], ...] = (
    ("b1_threads_bare_one_ratio", ">=", 0.95, "B1 throughput vs the one-task peer, threads pool"),
    ("b1_prefork_bare_one_ratio", ">=", 0.95, "B1 throughput vs the one-task peer, prefork pool"),
    ("b2_call_over_bare_one_call_p50", "<=", 1.1, "B2 sequential call vs the one-task peer (p50)"),
)


def _first(section: dict[str, Any], pool: str | None = None) -> dict[str, Any] | None:
    for entry in section.values():
        if pool is None or entry.get("pool") == pool:
            return entry  # type: ignore[no-any-return]
    return None


def figures(results: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers, flat: what the README quotes and the quick test checks."""
    out: dict[str, Any] = {}
    for kind in ("threads", "prefork"):
        b1 = _first(results.get("b1", {}), kind)
        if b1 is not None:
            out[f"b1_{kind}_pool"] = f"{kind} c={b1['concurrency']}"
            out[f"b1_{kind}_ratio"] = b1["ratio"]["median"]
            out[f"b1_{kind}_cpu_ratio"] = b1["cpu_ratio"]["median"]
            out[f"b1_{kind}_ours_per_s"] = _median(b1["ours_per_s"])
            out[f"b1_{kind}_bare_per_s"] = _median(b1["bare_per_s"])
            if "defaults_ratio" in b1:
                out[f"b1_{kind}_defaults_ratio"] = b1["defaults_ratio"]["median"]
                out[f"b1_{kind}_defaults_per_s"] = _median(b1["defaults_per_s"])
            if "bare_one_ratio" in b1:
                out[f"b1_{kind}_bare_one_ratio"] = b1["bare_one_ratio"]["median"]
                out[f"b1_{kind}_bare_one_per_s"] = _median(b1["bare_one_per_s"])
            if "bare_spaced_ratio" in b1:
                # Like for like: the fair peer with our worker's event spacing.
                out[f"b1_{kind}_bare_spaced_ratio"] = b1["bare_spaced_ratio"]["median"]
                out[f"b1_{kind}_bare_spaced_per_s"] = _median(b1["bare_spaced_per_s"])
            if "system_cpu_ratio" in b1:
                out[f"b1_{kind}_system_cpu_ratio"] = b1["system_cpu_ratio"]["median"]
            if "inline_ratio" in b1:
                # --ablate: ours over ours with tools on the task's thread.
                out[f"b1_{kind}_inline_ratio"] = b1["inline_ratio"]["median"]
                out[f"b1_{kind}_inline_per_s"] = _median(b1["inline_per_s"])
    b2 = _first(results.get("b2", {}))
    if b2 is not None:
        for name in (
            "call_over_bare_call_p50",
            "submit_over_apply_async_p50",
            "call_over_bare_one_call_p50",
            "call_over_bare_spaced_call_p50",
        ):
            # The median of the blocks' ratios, where the run has them.
            if f"{name}_pairs" in b2:
                out[f"b2_{name}"] = b2[f"{name}_pairs"]["median"]
        for name in (
            "ping_p50_ms",
            "submit_p50_ms",
            "apply_async_p50_ms",
            "submit_over_ping_p50",
            "submit_over_ping_p99",
            "submit_over_apply_async_p50",
            "submit_over_apply_async_p99",
            "added_over_ping_p50",
            "call_over_bare_call_p50",
            "call_p50_ms",
            "bare_call_p50_ms",
            "defaults_call_p50_ms",
            "defaults_apply_async_p50_ms",
            "call_over_defaults_call_p50",
        ):
            if name in b2 and f"b2_{name}" not in out:
                out[f"b2_{name}"] = b2[name]
    if "b3" in results:
        ours, bare = results["b3"]["ours"], results["b3"]["bare"]
        out["b3_store_commands_per_call"] = ours["store_commands_per_call"]
        out["b3_store_lua_commands_per_call"] = ours["store_lua_commands_per_call"]
        out["b3_caller_store_round_trips_per_call"] = ours["caller_store_round_trips_per_call"]
        out["b3_celery_commands_per_call"] = ours["celery_commands_per_call"]
        out["b3_bare_celery_commands_per_call"] = bare["celery_commands_per_call"]
    if "b4" in results:
        out["b4_round_trips"] = results["b4"]["round_trips"]
        out["b4_time_over_pipeline"] = results["b4"]["time_over_pipeline"]
    if "b5" in results:
        out["b5_runs"] = results["b5"]["runs"]
        out["b5_runs_per_s"] = results["b5"]["runs_per_s"]
        # Beside the figure: the reprocessing workers it ran on (older runs: the pool's).
        out["b5_workers"] = results["b5"].get("workers", results["b5"].get("pool"))
    if "b6" in results:
        out["b6_memory_over_payload"] = {
            str(r["raw_bytes"]): r["memory_over_payload"] for r in results["b6"]["records"]
        }
        out["b6_run_keys_bytes_per_call"] = results["b6"]["run_keys_bytes_per_call"]
    if "b6_scale" in results:
        scale = results["b6_scale"]
        for name in (
            "records",
            "bytes_per_record",
            "hash_max_listpack_value",
            "reaper_s",
            "run_ids_s",
            "runs_command_s",
        ):
            out[f"b6s_{name}"] = scale[name]
    if "b7" in results:
        out.update(_b7_figures(results["b7"]))
    if "b9" in results:
        b9 = results["b9"]
        out["b9_live_p50_ratio"] = b9["p50_ratio"]["median"]
        out["b9_live_p95_ratio"] = b9["p95_ratio"]["median"]
        out["b9_idle_p50_ms"] = b9["idle_p50_ms"]
        out["b9_busy_p50_ms"] = b9["busy_p50_ms"]
        out["b9_job_records_per_s"] = b9["job_records_per_s"]["median"]
    dbos = _first(results.get("dbos", {}))
    if dbos is not None:
        out.update(dbos_figures(dbos))
    return out


def _b7_figures(b7: dict[str, Any]) -> dict[str, Any]:
    stall, rate = b7["stall"], b7["throughput"]
    out: dict[str, Any] = {
        "b7_calls": stall["calls"],
        "b7_tick_lateness_max_ms": stall["tick_lateness"]["max_ms"],
        "b7_tick_lateness_p50_ms": stall["tick_lateness"]["p50_ms"],
        "b7_longest_step_cpu_ms": stall["longest_step_cpu_ms"],
        "b7_tick_cpu_max_ms": stall["tick_cpu"]["max_ms"],
        "b7_async_over_sync": rate["ratio"]["median"],
        "b7_async_per_s": _median(rate["async_per_s"]),
        "b7_sync_per_s": _median(rate["sync_per_s"]),
    }
    stalls = b7.get("stalls")
    if stalls is not None:
        for level in stalls["levels"]:
            prefix = f"b7_{level['calls']}"
            for name, value in level["tick_lateness"].items():
                out[f"{prefix}_tick_lateness_{name}"] = value
            out[f"{prefix}_longest_step_cpu_ms"] = level["longest_step_cpu_ms"]
            out[f"{prefix}_tick_cpu_max_ms"] = level["tick_cpu"]["max_ms"]
            if "loop_cpu_ms_per_call" in level:
                out[f"{prefix}_loop_cpu_ms_per_call"] = level["loop_cpu_ms_per_call"]
            for name, value in level.get("resources", {}).items():
                if isinstance(value, int | float) and name != "sample_s":
                    out[f"{prefix}_{name}"] = value
        repeat = stalls["repeat"]
        prefix = f"b7_{repeat['calls']}"
        out[f"{prefix}_runs"] = repeat["runs"]
        out[f"{prefix}_runs_under_{repeat['bound_ms']:g}_ms"] = repeat["under_bound"]
        if repeat["worst_ms"]:
            out[f"{prefix}_runs_worst_ms"] = max(repeat["worst_ms"])
    if "gc_pause_max_ms" in b7["precision"]:
        out["b7_gc_pause_max_ms"] = b7["precision"]["gc_pause_max_ms"]
    for wait, sides in b7["precision"].items():
        if isinstance(sides, dict):
            for side, got in sides.items():
                out[f"b7_over_{wait}s_{side}_p50_ms"] = got["p50_ms"]
                out[f"b7_over_{wait}s_{side}_p99_ms"] = got["p99_ms"]
    return out


def meets(value: float, op: str, bound: float) -> bool:
    """Whether ``value`` meets a target's ``op bound`` (``>=``, ``<=`` or ``<``)."""
    if op == ">=":
        return value >= bound
    if op == "<=":
        return value <= bound
    if op == "<":
        return value < bound
    raise ValueError(f"not a target comparison: {op!r}")


def targets(
    figs: dict[str, Any], spread_of: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """A row per target: its value and whether it is met, and for a ratio its spread over
    the pairs and whether that spread is past ``NOISY_SPREAD``."""
    rows = []
    for name, op, bound, label in TARGETS:
        value = figs.get(name)
        met = None
        if isinstance(value, int | float):
            met = meets(value, op, bound)
        row = {"figure": name, "target": f"{op} {bound:g}", "value": value, "met": met}
        row["what"] = label
        if spread_of and name in spread_of:
            row["spread"] = spread_of[name]
            row["noisy"] = spread_of[name]["noisy"]
        rows.append(row)
    return rows


def _value(row: dict[str, Any]) -> str:
    """The target's value, with its spread over the pairs (and ``noisy``) for a ratio."""
    if "spread" in row:
        return quoted(row["spread"])
    return _fmt(row["value"])


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return (
            "nan" if math.isnan(value) else f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
        )
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    return str(value)


def markdown(document: dict[str, Any]) -> str:
    meta, figs = document["meta"], document["figures"]
    lines = [
        "# tool-boundary benchmark",
        "",
        f"`{meta['command']}` at {meta['started_at']} (commit {meta['commit']}), "
        f"{meta['cores']} x {meta['cpu']}, {meta['memory_gib']} GiB, {meta['os']}; "
        f"Python {meta['python']}, Celery {meta['celery']}, kombu {meta['kombu']}, "
        f"redis-py {meta['redis_py']}, Redis {meta['redis_server']}; "
        f"load average {meta['load_before']} before, {meta.get('load_after')} after.",
        "",
        "| target | figure | value | met |",
        "|---|---|---|---|",
    ]
    for row in document["targets"]:
        met = {True: "yes", False: "**no**", None: "n/a"}[row["met"]]
        lines.append(
            f"| {row['what']} ({row['target']}) | `{row['figure']}` | {_value(row)} | {met} |"
        )
    lines += ["", "| figure | value |", "|---|---|"]
    lines += [f"| `{name}` | {_fmt(value)} |" for name, value in figs.items()]
    return "\n".join(lines) + "\n"


def print_table(document: dict[str, Any]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency
        print(markdown(document))
        return
    console = Console()
    table = Table(title="tool-boundary benchmark: targets")
    for column in ("what", "target", "value", "met"):
        table.add_column(column)
    for row in document["targets"]:
        met = {True: "[green]yes", False: "[red]no", None: "n/a"}[row["met"]]
        table.add_row(row["what"], row["target"], _value(row), met)
    console.print(table)
    figures_table = Table(title="figures (ratios are ours / bare unless named)")
    figures_table.add_column("figure")
    figures_table.add_column("value")
    for name, value in document["figures"].items():
        figures_table.add_row(name, _fmt(value))
    console.print(figures_table)


def chart(results: dict[str, Any], path: Path) -> Path | None:
    """B1 throughput (ours and bare, median with min-max) and B2 latency (p50, p99) per pool."""
    b1, b2 = results.get("b1", {}), results.get("b2", {})
    if not b1 and not b2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    _b1_panel(left, b1)
    _b2_panel(right, b2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _b1_panel(ax: Any, b1: dict[str, Any]) -> None:
    labels = list(b1)
    width = 0.27
    sides = (
        (-width, "ours", "#1f77b4", "ToolBoundary"),
        (0.0, "bare", "#bbbbbb", "bare Celery chain, our settings (fair peer)"),
        (width, "defaults", "#ff7f0e", "bare Celery chain, Celery's defaults"),
    )
    for offset, side, color, name in sides:
        if any(f"{side}_per_s" not in b1[label] for label in labels):
            continue
        medians, low, high = [], [], []
        for label in labels:
            values = b1[label][f"{side}_per_s"]
            m = _median(values)
            medians.append(m)
            low.append(m - min(values))
            high.append(max(values) - m)
        xs = [i + offset for i in range(len(labels))]
        ax.bar(xs, medians, width, yerr=[low, high], capsize=3, label=name, color=color)
    for i, label in enumerate(labels):
        ratio = b1[label]["ratio"]
        top = max(*b1[label]["ours_per_s"], *b1[label]["bare_per_s"])
        _note_above(ax, f"{ratio['median']:.2f}\n({ratio['min']:.2f}-{ratio['max']:.2f})", (i, top))
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("calls per second (N in flight)")
    ax.set_title("B1 end-to-end throughput; ours/fair peer ratio (min-max)")
    ax.margins(y=0.2)
    ax.legend(loc="lower right", fontsize=8)


def _note_above(ax: Any, text: str, xy: tuple[float, float]) -> None:
    """``text`` in small type, centred just above the point ``xy``."""
    ax.annotate(text, xy, textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)


def _b2_panel(ax: Any, b2: dict[str, Any]) -> None:
    labels = list(b2)
    series = (
        ("ping", "Redis PING", "#2ca02c"),
        ("apply_async", "bare chain apply_async", "#bbbbbb"),
        ("submit", "ToolBoundary.submit", "#1f77b4"),
    )
    width = 0.26
    for n, (key, name, color) in enumerate(series):
        xs = [i + (n - 1) * width for i in range(len(labels))]
        ax.bar(
            xs,
            [b2[label][f"{key}_p50_ms"] for label in labels],
            width,
            label=f"{name} p50",
            color=color,
        )
        ax.scatter(
            xs,
            [b2[label][f"{key}_p99_ms"] for label in labels],
            marker="_",
            s=200,
            color="black",
            zorder=3,
            label="p99" if n == 0 else None,
        )
    for i, label in enumerate(labels):
        _note_above(
            ax,
            f"{b2[label]['submit_over_ping_p50']:.1f} pings",
            (i + width, b2[label]["submit_p50_ms"]),
        )
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("milliseconds")
    ax.set_title("B2 synchronous part of a call (p50 bars, p99 ticks)")
    ax.margins(y=0.3)
    ax.legend(fontsize=8, ncol=2, loc="upper left")


def write_outputs(document: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    document["spreads"] = spreads(document["results"])
    document["targets"] = targets(document["figures"], document["spreads"])
    written = []
    path = out / "bench.json"
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    written.append(path)
    png = chart(document["results"], out / "b1_b2.png")
    if png is not None:
        written.append(png)
    path = out / "report.md"
    path.write_text(markdown(document))
    written.append(path)
    return written
