"""``python -m bench.reports.readme [--check]``: regenerates the tables of ``bench/README.md`` from
the per-run JSON committed under ``bench/results/``, so every quoted figure can be derived
again from the runs that measured it.

A generated block sits between two markers in the README:

    <!-- bench:table NAME GLOB -->
    ...generated, do not edit...
    <!-- bench:end -->

``NAME`` picks a renderer from ``RENDERERS``; ``GLOB`` (relative to ``bench/``) picks the
runs, in file-name order. A new benchmark adds a renderer here and a block in the README.
``--check`` changes nothing and exits 1 when a block is stale (a test runs it).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.reports.current import current_table
from bench.reports.readme_dbos import dbos_table, spreads_table
from bench.reports.report import ISSUE_26_TARGETS, ONE_TASK_TARGETS, TARGETS, meets
from bench.reports.summarize import rows as summary_rows

BENCH = Path(__file__).resolve().parents[1]
README = BENCH / "README.md"

_BLOCK = re.compile(
    r"(?P<begin><!-- bench:table (?P<name>[\w-]+) (?P<glob>\S+) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<end><!-- bench:end -->)",
    re.DOTALL,
)


@dataclass(frozen=True)
class Run:
    """One committed run: its path (relative to ``bench/``) and its JSON document."""

    path: str
    document: dict[str, Any]

    @property
    def figures(self) -> dict[str, Any]:
        return self.document.get("figures", {})  # type: ignore[no-any-return]

    @property
    def results(self) -> dict[str, Any]:
        return self.document.get("results", {})  # type: ignore[no-any-return]


class ReadmeError(Exception):
    """A block names no renderer, or its glob matches no committed run."""


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def _median_spread(values: list[float]) -> str:
    """``median (min-max)``, or the value alone when every run agrees."""
    if not values:
        return "-"
    median = statistics.median(values)
    low, high = min(values), max(values)
    if _num(low) == _num(high):
        return f"{_num(median)}"
    return f"{_num(median)} ({_num(low)}-{_num(high)})"


def _values(runs: list[Run], name: str) -> list[float]:
    return [
        float(run.figures[name])
        for run in runs
        if isinstance(run.figures.get(name), int | float)
        and not isinstance(run.figures.get(name), bool)
    ]


def _head(*titles: str) -> list[str]:
    """A table's header row and its separator."""
    return ["| " + " | ".join(titles) + " |", "|---" * len(titles) + "|"]


def _with(runs: list[Run], name: str) -> list[tuple[Run, dict[str, Any]]]:
    """Each run that holds results ``name``, with them."""
    return [(run, run.results[name]) for run in runs if run.results.get(name) is not None]


def targets_table(
    runs: list[Run], targets: tuple[tuple[str, str, float, str], ...] = ISSUE_26_TARGETS
) -> str:
    """Each target's median over the runs, with the runs' spread; met by the median.
    ``targets``: issue 26's bounds (the older sets), or issue 35's (``targets-35``)."""
    lines = _head("target", "median of the runs (min-max)", "runs", "bound", "met")
    for name, op, bound, label in targets:
        values = _values(runs, name)
        if not values:
            continue
        median = statistics.median(values)
        met = meets(median, op, bound)
        lines.append(
            f"| {label} | **{_median_spread(values)}** | {len(values)} | {op} {bound:g} | "
            f"{'yes' if met else '**no**'} |"
        )
    return "\n".join(lines)


def pools_table(runs: list[Run]) -> str:
    """B1 and B2 per pool: ratios against both peers and each side's calls per second."""
    labels: list[str] = []
    for run in runs:
        for section in ("b1", "b2"):
            for label in run.results.get(section, {}):
                if label not in labels:
                    labels.append(label)
    lines = _head(
        "pool",
        "B1 ours / fair peer",
        "B1 ours / Celery defaults",
        "calls/s ours, fair, defaults",
        "B1 CPU fair / ours",
        "B2 call p50 ours / fair",
        "B2 submit / apply_async p50",
    )
    for label in labels:
        b1 = [run.results["b1"][label] for run in runs if label in run.results.get("b1", {})]
        b2 = [run.results["b2"][label] for run in runs if label in run.results.get("b2", {})]

        def per_s(side: str, b1: list[dict[str, Any]] = b1) -> str:
            values = [statistics.median(e[f"{side}_per_s"]) for e in b1 if f"{side}_per_s" in e]
            return _num(statistics.median(values)) if values else "-"

        cells = [
            _median_spread([e["ratio"]["median"] for e in b1]),
            _median_spread([e["defaults_ratio"]["median"] for e in b1 if "defaults_ratio" in e]),
            f"{per_s('ours')}, {per_s('bare')}, {per_s('defaults')}",
            _median_spread([e["cpu_ratio"]["median"] for e in b1]),
            _median_spread([e["call_over_bare_call_p50"] for e in b2]),
            _median_spread([e["submit_over_apply_async_p50"] for e in b2]),
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: B1's sides as the costs table names them, in its order.
COST_SIDES = (
    ("ours", "ours"),
    ("inline", "ours, tools on the task's thread (ablation)"),
    ("bare", "fair peer"),
    ("bare_one", "one-task peer"),
    ("defaults", "Celery defaults"),
)
#: Per-call figures of a B1 sample the costs table reports, with their headings.
COST_FIELDS = (
    ("worker_cpu_ms", "worker CPU ms"),
    ("client_cpu_ms", "client CPU ms"),
    ("redis_cpu_ms", "Redis CPU ms"),
    ("worker_switches", "worker context switches"),
)


def _b1_by_pool(runs: list[Run]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each B1 pool label (in the order first seen) with the runs' B1 entries for it."""
    labels = dict.fromkeys(label for run in runs for label in run.results.get("b1", {}))
    for label in labels:
        yield (
            label,
            [run.results["b1"][label] for run in runs if label in run.results.get("b1", {})],
        )


def _side_median(b1: list[dict[str, Any]], side: str, field: str) -> float | None:
    """Median over the runs of each run's median of ``field`` over the side's samples."""
    per_run = []
    for entry in b1:
        values = [s[field] for s in entry.get(side, []) if s.get(field) is not None]
        if values:
            per_run.append(statistics.median(values))
    return statistics.median(per_run) if per_run else None


def costs_table(runs: list[Run]) -> str:
    """B1's cost per call on each side and pool (medians over the runs of each run's median
    over its repetitions): the worker's, client's and Redis server's CPU, the worker's
    context switches, and calls/s; with ``--ablate``, the ablation side too."""
    lines = _head("pool", "side", "calls/s", *(title for _, title in COST_FIELDS))
    for label, b1 in _b1_by_pool(runs):
        for side, title in COST_SIDES:
            rates = [statistics.median(e[f"{side}_per_s"]) for e in b1 if f"{side}_per_s" in e]
            if not rates:
                continue
            cells = [_num(statistics.median(rates))]
            for field, _ in COST_FIELDS:
                value = _side_median(b1, side, field)
                cells.append("-" if value is None else _num(value))
            lines.append(f"| {label} | {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ablation_table(runs: list[Run]) -> str:
    """``--ablate`` runs per pool: ours over the ablation (what the thread hand-offs cost),
    the ablation over the fair peer (what the rest costs), and the CPU ratios with the Redis
    server's CPU counted (fair / ours)."""
    lines = _head(
        "pool",
        "B1 ours / ablation",
        "B1 ablation / fair peer",
        "B1 ours / fair peer",
        "CPU incl. Redis, fair / ours",
        "CPU incl. Redis, fair / ablation",
    )
    for label, entries in _b1_by_pool(runs):
        b1 = [e for e in entries if "inline_ratio" in e]
        if not b1:
            continue
        ablation_over_fair = [
            statistics.median(
                i / b for i, b in zip(e["inline_per_s"], e["bare_per_s"], strict=True)
            )
            for e in b1
        ]
        fair_over_ablation = []
        for e in b1:
            # Ours' CPU over the ablation's, times the fair peer's over ours, per repetition.
            pairs = zip(e["system_cpu_ratios"], e["inline_system_cpu_ratios"], strict=True)
            fair_over_ablation.append(statistics.median(f / i for f, i in pairs))
        cells = [
            _median_spread([e["inline_ratio"]["median"] for e in b1]),
            _median_spread(ablation_over_fair),
            _median_spread([e["ratio"]["median"] for e in b1]),
            _median_spread([e["system_cpu_ratio"]["median"] for e in b1]),
            _median_spread(fair_over_ablation),
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figures_table(runs: list[Run]) -> str:
    """Every headline figure ``bench.reports.summarize`` quotes: median and spread over the runs."""
    lines = _head("figure", "median of the runs (min-max)", "runs")
    for row in summary_rows([run.document for run in runs]):
        values = [row["min"], row["median"], row["max"]]
        if row["min"] == row["max"]:
            cell = _num(values[1])
        else:
            cell = f"{_num(values[1])} ({_num(values[0])}-{_num(values[2])})"
        lines.append(f"| {row['label']} | {cell} | {row['runs']} |")
    return "\n".join(lines)


def runs_table(runs: list[Run]) -> str:
    """Where each figure comes from: the file, its command, commit and the machine's load."""
    lines = _head(
        "file", "command", "started (UTC)", "commit", "load average before / after (1, 5, 15 min)"
    )
    for run in runs:
        meta = run.document.get("meta", {})
        load = f"{_load(meta.get('load_before'))} / {_load(meta.get('load_after'))}"
        lines.append(
            f"| `{run.path}` | `{meta.get('command', '?')}` | {meta.get('started_at', '?')} | "
            f"{meta.get('commit', '?')} | {load} |"
        )
    return "\n".join(lines)


def _load(values: Any) -> str:
    if not isinstance(values, list):
        return "?"
    return ", ".join(f"{v:.2f}" for v in values)


def b5_table(runs: list[Run]) -> str:
    """Batch reprocessing: runs per second and what was checked, per run."""
    lines = _head(
        "file", "runs x calls", "reprocessing s", "runs/s", "facts", "failed", "written calls/s"
    )
    with_b5 = _with(runs, "b5")
    for run, b5 in with_b5:
        lines.append(
            f"| `{run.path}` | {b5['runs']:,} x {b5['calls_per_run']} | "
            f"{b5['reprocess_s']:.2f} | **{_num(b5['runs_per_s'])}** | {b5['facts']:,} | "
            f"{b5['failed']} | {_num(b5['calls_written_per_s'])} |"
        )
    values = [float(b5["runs_per_s"]) for _, b5 in with_b5]
    lines.append(f"| median of {len(values)} | | | **{_median_spread(values)}** | | | |")
    return "\n".join(lines)


def b6_table(runs: list[Run]) -> str:
    """One sealed record per raw size: memory against payload, and its encoding."""
    lines = _head(
        "file",
        "listpack value",
        "raw bytes",
        "payload bytes",
        "MEMORY USAGE",
        "memory / payload",
        "encoding",
    )
    for run, b6 in _with(runs, "b6"):
        setting = b6.get("hash_max_listpack_value", "?")
        for record in b6["records"]:
            lines.append(
                f"| `{run.path}` | {setting} | {record['raw_bytes']:,} | "
                f"{record['payload_bytes']:,} | {record['memory_bytes']:,} | "
                f"{record['memory_over_payload']:.2f} | {record['encoding']} |"
            )
    return "\n".join(lines)


def b6_scale_table(runs: list[Run]) -> str:
    """The store at scale: memory per record, and the reaper's and ``runs``' cost."""
    lines = _head(
        "file",
        "records",
        "listpack value",
        "bytes per record (INFO)",
        "sample record (MEMORY USAGE, encoding)",
        "reaper: runs in its index",
        "reaper: due search s (found)",
        "runs: listing s (how)",
        "runs: SCAN s (same run)",
        "runs: summary per run ms",
        "runs command s (all runs)",
        "reaper: next pass s",
    )
    for run, b6s in _with(runs, "b6_scale"):
        lines.append(
            f"| `{run.path}` | {b6s['records']:,} | {b6s['hash_max_listpack_value']} | "
            f"**{_num(b6s['bytes_per_record'])}** | {b6s['sample_record_bytes']:,}, "
            f"{b6s['sample_record_encoding']} | {_indexed(b6s, 'pending_runs_indexed')} | "
            f"**{b6s['reaper_s']:.3f}** ({b6s['reaper_found']} of {b6s['pending_calls']}) | "
            f"{b6s['run_ids_s']:.2f} ({_listing(b6s)}) | {_scan(b6s)} | "
            f"{b6s['summaries_per_run_ms']:.3f} | **{_num(b6s['runs_command_s'])}** | "
            f"{_again(b6s)} |"
        )
    return "\n".join(lines)


def _indexed(b6s: dict[str, Any], field: str) -> str:
    return f"{b6s[field]:,}" if field in b6s else "(not measured)"


def _listing(b6s: dict[str, Any]) -> str:
    if "runs_indexed" not in b6s:
        return "SCAN"
    return f"index of {b6s['runs_indexed']:,}" if b6s["runs_indexed"] else "SCAN"


def _scan(b6s: dict[str, Any]) -> str:
    if "scan_run_ids_s" not in b6s:
        return "(not measured)"
    return f"{b6s['scan_run_ids_s']:.2f} ({b6s['scan_run_ids_found']:,} found)"


def _again(b6s: dict[str, Any]) -> str:
    if "reaper_again_s" not in b6s:
        return "(not measured)"
    return f"{b6s['reaper_again_s']:.3f} ({b6s['reaper_again_found']} found)"


def _profile_cell(summary: dict[str, Any], key: str, calls: int) -> str:
    if not summary:
        return "-"
    if key == "per_call":
        return f"{summary['samples'] / calls:.2f}" if calls else "-"
    if key == "calls_per_s":
        return f"{summary['calls_per_s']:.0f}"
    return f"{summary['boundary_steps_share']:.1%}"


def _share_rows(title: str, pairs: list[tuple[str, float]], top: int) -> list[str]:
    if not pairs:
        return []
    rows = [f"| {title} | |", "|---|---|"]
    # py-spy's per-process root frame names the command line: not a place in the code.
    shown = [(name, share) for name, share in pairs if not name.startswith("process ")]
    rows += [f"| `{name}` | {share:.1%} |" for name, share in shown[:top]]
    return [*rows, ""]


def profile_table(runs: list[Run], top: int = 10) -> str:
    """py-spy (GIL holder) of our worker and the fair peer's during one B1 measurement per
    pool: samples per call, where the boundary's steps spend theirs, and the leaf frames."""
    lines: list[str] = []
    for run in runs:
        calls = run.document.get("meta", {}).get("sizes", {}).get("b1_calls", 0)
        for pool, sides in run.results.get("profiles", {}).items():
            ours, bare = sides.get("ours") or {}, sides.get("bare") or {}
            lines += [f"**{pool}** (`{run.path}`, {calls} calls a side):", ""]
            lines += ["| | ours | fair peer |", "|---|---|---|"]
            for key, label in (
                ("per_call", "GIL samples per call (250/s)"),
                ("calls_per_s", "calls/s while profiled"),
                ("steps", "samples in the boundary's steps"),
            ):
                lines.append(
                    f"| {label} | {_profile_cell(ours, key, calls)} | "
                    f"{_profile_cell(bare, key, calls)} |"
                )
            lines.append("")
            lines += _share_rows(
                "ours: under the steps (share of all samples)", ours.get("under_steps", []), top
            )
            lines += _share_rows(
                "ours: own samples (leaf frames)", ours.get("self_frames", []), top
            )
            lines += _share_rows(
                "fair peer: own samples (leaf frames)", bare.get("self_frames", []), top
            )
    return "\n".join(lines).rstrip("\n") or "(no profile in these runs)"


def b7_table(runs: list[Run]) -> str:
    """The async boundary on one event loop: stall, throughput against threads, per run."""
    lines = _head(
        "file",
        "calls",
        "tick lateness p50 / p99 / worst, ms",
        "longest loop step, ms CPU",
        "loop CPU per tick, worst, ms",
        "async / sync calls per s",
        "async / sync",
    )
    with_b7 = _with(runs, "b7")
    for run, b7 in with_b7:
        stall, rate = b7["stall"], b7["throughput"]
        late = stall["tick_lateness"]
        lines.append(
            f"| `{run.path}` | {stall['calls']} | {_num(late['p50_ms'])} / "
            f"{_num(late['p99_ms'])} / **{_num(late['max_ms'])}** | "
            f"**{_num(stall['longest_step_cpu_ms'])}** | {_num(stall['tick_cpu']['max_ms'])} | "
            f"{_num(statistics.median(rate['async_per_s']))} / "
            f"{_num(statistics.median(rate['sync_per_s']))} | "
            f"**{_num(rate['ratio']['median'])}** |"
        )
    cells = [
        _median_spread([b7["stall"]["tick_lateness"]["max_ms"] for _, b7 in with_b7]),
        _median_spread([b7["stall"]["longest_step_cpu_ms"] for _, b7 in with_b7]),
        _median_spread([b7["stall"]["tick_cpu"]["max_ms"] for _, b7 in with_b7]),
        _median_spread([b7["throughput"]["ratio"]["median"] for _, b7 in with_b7]),
    ]
    lines.append(
        f"| median of {len(with_b7)} | | worst {cells[0]} | {cells[1]} | {cells[2]} | | "
        f"{cells[3]} |"
    )
    return "\n".join(lines)


def _stall_levels(b7: dict[str, Any]) -> list[dict[str, Any]]:
    """A run's stall measurements: its levels, or (a run from before the levels) its one."""
    stalls = b7.get("stalls")
    return list(stalls["levels"]) if stalls else [b7["stall"]]


def _per_call_cell(stall: dict[str, Any]) -> str:
    per_call = stall.get("loop_cpu_ms_per_call")
    return "-" if per_call is None else _num(per_call)


def _resource_cell(stall: dict[str, Any]) -> str:
    got = stall.get("resources")
    if not got:
        return "-"
    parts = []
    if "rss_peak_growth_mib" in got:
        parts.append(f"RSS +{_num(got['rss_peak_growth_mib'])} MiB")
    if "sockets_peak" in got:
        parts.append(f"{got['sockets_peak']} sockets")
    if "redis_clients_peak" in got:
        parts.append(f"{got['redis_clients_peak']} Redis clients")
    return ", ".join(parts) or "-"


def b7_stalls_table(runs: list[Run]) -> str:
    """The stall at each in-flight count (a run from before the levels: its one count), with
    memory and connections where measured, and the repeated runs of the smallest count."""
    lines = _head(
        "file",
        "in flight",
        "tick lateness p50 / p99 / worst, ms",
        "longest loop step, ms CPU",
        "loop CPU per tick, worst, ms",
        "loop CPU per call, ms",
        "peak memory and connections",
    )
    repeats = []
    for run, b7 in _with(runs, "b7"):
        for stall in _stall_levels(b7):
            late = stall["tick_lateness"]
            lines.append(
                f"| `{run.path}` | {stall['calls']} | {_num(late['p50_ms'])} / "
                f"{_num(late['p99_ms'])} / **{_num(late['max_ms'])}** | "
                f"{_num(stall['longest_step_cpu_ms'])} | {_num(stall['tick_cpu']['max_ms'])} | "
                f"{_per_call_cell(stall)} | {_resource_cell(stall)} |"
            )
        if b7.get("stalls"):
            repeats.append((run, b7["stalls"]["repeat"]))
    if repeats:
        lines += ["", *_head("file", "in flight", "runs under the bound", "worst of each run, ms")]
        for run, repeat in repeats:
            worst = ", ".join(_num(w) for w in repeat["worst_ms"])
            lines.append(
                f"| `{run.path}` | {repeat['calls']} | **{repeat['under_bound']} of "
                f"{repeat['runs']}** under {repeat['bound_ms']:g} ms | {worst} |"
            )
    return "\n".join(lines)


def b7_precision_table(runs: list[Run]) -> str:
    """Actual minus requested wait on a call still PROJECTING: median over the runs (with
    their spread) of each run's p50 and p99."""
    lines = _head(
        "requested wait", "outcome p50, ms over", "outcome p99", "aoutcome p50", "aoutcome p99"
    )
    precisions = [b7["precision"] for _, b7 in _with(runs, "b7")]
    first = precisions[0] if precisions else {}
    waits = [w for w, got in first.items() if isinstance(got, dict)]
    for wait in waits:
        cells = [
            _median_spread([precision[wait][side][q] for precision in precisions])
            for side in ("sync", "async")
            for q in ("p50_ms", "p99_ms")
        ]
        lines.append(f"| {wait} s | " + " | ".join(cells) + " |")
    pauses = [p["gc_pause_max_ms"] for p in precisions if "gc_pause_max_ms" in p]
    if pauses:
        lines.append(f"| longest GC pause during the waits, ms | {_median_spread(pauses)} | | | |")
    return "\n".join(lines)


#: Block name -> renderer. Each renderer gets the runs its block's glob matched.
RENDERERS: dict[str, Callable[[list[Run]], str]] = {
    "current": current_table,
    "targets": targets_table,
    "targets-35": lambda runs: targets_table(runs, TARGETS + ONE_TASK_TARGETS),
    "dbos": dbos_table,
    "spreads": spreads_table,
    "pools": pools_table,
    "costs": costs_table,
    "ablation": ablation_table,
    "figures": figures_table,
    "runs": runs_table,
    "b5": b5_table,
    "b6": b6_table,
    "b6-scale": b6_scale_table,
    "profile": profile_table,
    "b7": b7_table,
    "b7-stalls": b7_stalls_table,
    "b7-precision": b7_precision_table,
}


def load_runs(glob: str, root: Path = BENCH) -> list[Run]:
    paths = sorted(root.glob(glob))
    if not paths:
        raise ReadmeError(f"no committed run matches {glob!r} under {root}")
    return [
        Run(path=path.relative_to(root).as_posix(), document=json.loads(path.read_text()))
        for path in paths
    ]


def render(text: str, root: Path = BENCH) -> str:
    """``text`` with every generated block rendered again from the runs under ``root``."""

    def block(match: re.Match[str]) -> str:
        name, glob = match["name"], match["glob"]
        renderer = RENDERERS.get(name)
        if renderer is None:
            raise ReadmeError(f"no renderer for table {name!r}")
        body = renderer(load_runs(glob, root)).rstrip("\n")
        return f"{match['begin']}{body}\n{match['end']}"

    return _BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reports.readme", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument(
        "--chart",
        type=Path,
        help="also draw b1_b2.png beside the README from this committed run's JSON",
    )
    args = parser.parse_args(argv)
    if args.chart is not None:
        from bench.reports.report import chart

        document = json.loads(args.chart.read_text())
        drawn = chart(document["results"], args.readme.parent / "b1_b2.png")
        print(f"drew {drawn}")
    text = args.readme.read_text()
    fresh = render(text, args.readme.parent)
    if args.check:
        if fresh != text:
            print(f"{args.readme}: generated tables are stale; run python -m bench.reports.readme")
            return 1
        return 0
    if fresh != text:
        args.readme.write_text(fresh)
        print(f"rewrote {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
