"""``python -m bench.reports.summarize RUN.json ...``: each headline figure's median and spread
(min-max) over several benchmark runs, as a Markdown table."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

#: Figures quoted over runs, and how to print them.
QUOTED: tuple[tuple[str, str], ...] = (
    ("b1_threads_ratio", "B1 throughput ours/bare, threads"),
    ("b1_threads_cpu_ratio", "B1 CPU per call bare/ours, threads"),
    ("b1_prefork_ratio", "B1 throughput ours/bare, prefork"),
    ("b1_prefork_cpu_ratio", "B1 CPU per call bare/ours, prefork"),
    ("b2_submit_over_ping_p50", "B2 submit p50 / PING p50"),
    ("b2_submit_over_ping_p99", "B2 submit p99 / PING p99"),
    ("b2_submit_over_apply_async_p50", "B2 submit p50 / bare apply_async p50"),
    ("b2_submit_over_apply_async_p99", "B2 submit p99 / bare apply_async p99"),
    ("b2_added_over_ping_p50", "B2 (submit - apply_async) p50 / PING p50"),
    ("b2_call_over_bare_call_p50", "B2 sequential call p50, ours/bare"),
    ("b3_store_commands_per_call", "B3 store commands per call"),
    ("b3_store_lua_commands_per_call", "B3 commands inside the store's scripts per call"),
    ("b3_celery_commands_per_call", "B3 Celery commands per call (ours)"),
    ("b3_bare_celery_commands_per_call", "B3 Celery commands per chain (bare)"),
    ("b4_round_trips", "B4 observe round trips (100-call run)"),
    ("b4_time_over_pipeline", "B4 observe time / 100 pipelined HGETALLs"),
    ("b5_runs_per_s", "B5 reprocessing, runs per second"),
    ("b6_run_keys_bytes_per_call", "B6 run keys, bytes per call"),
)


def rows(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name, label in QUOTED:
        values = [
            d["figures"][name] for d in documents if isinstance(d["figures"].get(name), int | float)
        ]
        if values:
            out.append(
                {
                    "figure": name,
                    "label": label,
                    "runs": len(values),
                    "median": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                }
            )
    sizes = sorted(
        {k for d in documents for k in d["figures"].get("b6_memory_over_payload", {})}, key=int
    )
    for size in sizes:
        values = [
            d["figures"]["b6_memory_over_payload"][size]
            for d in documents
            if size in d["figures"].get("b6_memory_over_payload", {})
        ]
        out.append(
            {
                "figure": f"b6_memory_over_payload[{size}]",
                "label": f"B6 memory / payload bytes, raw {size} B",
                "runs": len(values),
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
        )
    return out


def markdown(documents: list[dict[str, Any]]) -> str:
    lines = ["| figure | median | spread (min-max) | runs |", "|---|---|---|---|"]
    for row in rows(documents):
        lines.append(
            f"| {row['label']} | {row['median']:.3g} | {row['min']:.3g}-{row['max']:.3g} | "
            f"{row['runs']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reports.summarize", description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="bench.json files of several runs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args(argv)
    documents = [json.loads(path.read_text()) for path in args.runs]
    if args.json:
        print(json.dumps(rows(documents), indent=2))
    else:
        print(markdown(documents), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
