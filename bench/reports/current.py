"""The one table of current figures in ``bench/README.md`` (``<!-- bench:table current
results/*/*.json -->``): for each figure, the median over the runs of the set that measured it
last, with the runs' spread, its bound, the set, the Redis persistence it ran with, the commit
and the machine; below it, the command each set was run with (from the runs' own JSON)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from bench.reports.report import meets

#: A value of one run (``None``: the run does not hold it).
Extract = Callable[[dict[str, Any]], float | None]


def figure(name: str) -> Extract:
    def extract(document: dict[str, Any]) -> float | None:
        value = document.get("figures", {}).get(name)
        return float(value) if isinstance(value, int | float) else None

    return extract


def b8(part: str) -> Extract:
    def extract(document: dict[str, Any]) -> float | None:
        found = document.get("results", {}).get("b8", {}).get(part, {}).get("ratio")
        return float(found) if isinstance(found, int | float) else None

    return extract


def b8_redis_cpu(document: dict[str, Any]) -> float | None:
    """Redis CPU a call in turns over one by one."""
    found = document.get("results", {}).get("b8", {}).get("throughput", {}).get("redis_cpu_ratio")
    return float(found) if isinstance(found, int | float) else None


def persistence_label(found: dict[str, str] | None) -> str:
    """What the run's Redis kept across a crash (its ``meta.persistence``, ``CONFIG GET``):
    ``AOF everysec``, ``AOF always``, ``RDB snapshots``, ``none``, or ``not recorded`` for a
    run from before the bench read it."""
    if not found:
        return "not recorded"
    if found.get("appendonly") == "yes":
        return f"AOF {found.get('appendfsync', '?')}"
    return "RDB snapshots" if found.get("save") else "none"


def sealed_runs_per_s(document: dict[str, Any]) -> float | None:
    found = document.get("sealed", {}).get("runs_per_s", {}).get("median")
    return float(found) if isinstance(found, int | float) else None


#: (what, set, file name prefix, value, bound operator, bound) for each row, in order.
ROWS: tuple[tuple[str, str, str, Extract, str, float | None], ...] = (
    # Like for like: the fair peer's worker spaces its task events as ours does.
    ("B1 calls/s, ours / fair peer, like for like, threads c=8", "like-pack", "run",
     figure("b1_threads_bare_spaced_ratio"), ">=", 0.95),
    ("B1 calls/s, ours / fair peer, like for like, prefork c=2", "like-pack", "run",
     figure("b1_prefork_bare_spaced_ratio"), ">=", 0.95),
    ("B2 sequential call p50, ours / fair peer, like for like", "like-pack", "run",
     figure("b2_call_over_bare_spaced_call_p50"), "<=", 1.1),
    # The shipping default against stock Celery (the peer's events as Celery sends them).
    ("B1 calls/s, ours / stock fair peer, threads c=8", "like-pack", "run",
     figure("b1_threads_ratio"), ">=", 0.95),
    ("B1 calls/s, ours / stock fair peer, prefork c=2", "like-pack", "run",
     figure("b1_prefork_ratio"), ">=", 0.95),
    ("B2 sequential call p50, ours / stock fair peer", "like-pack", "run",
     figure("b2_call_over_bare_call_p50"), "<=", 1.1),
    ("B2 submit p50 / the peer's apply_async p50", "like-pack", "run",
     figure("b2_submit_over_apply_async_p50"), "<=", 1.0),
    # The same on an append-only file (store, broker and backend on it, both sides).
    ("B1 calls/s, ours / fair peer, like for like, threads c=8", "aof-everysec-pack", "run",
     figure("b1_threads_bare_spaced_ratio"), ">=", 0.95),
    ("B1 calls/s, ours / fair peer, like for like, prefork c=2", "aof-everysec-pack", "run",
     figure("b1_prefork_bare_spaced_ratio"), ">=", 0.95),
    ("B2 sequential call p50, ours / fair peer, like for like", "aof-everysec-pack", "run",
     figure("b2_call_over_bare_spaced_call_p50"), "<=", 1.1),
    ("B1 calls/s, ours / fair peer, like for like, threads c=8", "aof-always-pack", "run",
     figure("b1_threads_bare_spaced_ratio"), ">=", 0.95),
    ("B1 calls/s, ours / fair peer, like for like, prefork c=2", "aof-always-pack", "run",
     figure("b1_prefork_bare_spaced_ratio"), ">=", 0.95),
    ("B2 sequential call p50, ours / fair peer, like for like", "aof-always-pack", "run",
     figure("b2_call_over_bare_spaced_call_p50"), "<=", 1.1),
    ("B1 one hop (in line) / one-task peer, threads c=8", "inline-pack", "run",
     figure("b1_threads_bare_one_ratio"), ">=", 0.95),
    ("B1 one hop (in line) / one-task peer, prefork c=2", "inline-pack", "run",
     figure("b1_prefork_bare_one_ratio"), ">=", 0.95),
    ("B2 one hop call p50 / one-task peer", "inline-pack", "run",
     figure("b2_call_over_bare_one_call_p50"), "<=", 1.15),
    ("DBOS: calls/s, ours / DBOS at 10 ms polling", "dbos-pack", "run",
     figure("dbos_ratio"), ">=", 1.5),
    ("DBOS: call p50, ours / DBOS at 10 ms polling", "dbos-pack", "run",
     figure("dbos_call_p50_ratio"), "<=", 0.25),
    ("DBOS: calls/s, ours / DBOS at 10 ms polling", "dbos-aof-everysec", "run",
     figure("dbos_ratio"), ">=", 1.5),
    ("DBOS: call p50, ours / DBOS at 10 ms polling", "dbos-aof-everysec", "run",
     figure("dbos_call_p50_ratio"), "<=", 0.25),
    ("DBOS: calls/s, ours / DBOS at 10 ms polling", "dbos-aof-always", "run",
     figure("dbos_ratio"), ">=", 1.5),
    ("DBOS: call p50, ours / DBOS at 10 ms polling", "dbos-aof-always", "run",
     figure("dbos_call_p50_ratio"), "<=", 0.25),
    ("B5 runs/s of facts from sealed projections, 10,000 runs of 10 calls, 2 workers x "
     "threads c=4", "b5-pack", "run", figure("b5_runs_per_s"), ">=", 5000),
    ("B6 bytes a record, 1,000,000 records", "b6-after", "default",
     figure("b6s_bytes_per_record"), "<=", None),
    ("B7 worst event-loop tick lateness, 200 in flight, ms", "b7-pack", "run",
     figure("b7_200_tick_lateness_max_ms"), "<", 20),
    ("B8 a turn of 8's submit / one call's", "turns-pack", "run", b8("submit"), "<=", 2.0),
    ("B8 a turn of 8 calls of a 50 ms tool / one such call, p50, threads c=8", "turns-pack",
     "run", b8("latency"), "<=", 1.25),
    ("B8 the same on 2 worker processes x threads c=8 (one a core)", "turns-2p", "run",
     b8("latency"), "<=", 1.25),
    ("B8 the same, projected in line", "turns-inline-pack", "run", b8("latency"), "<=", 1.25),
    ("B8 Redis CPU a call, in turns / one by one", "turns-pack", "run", b8_redis_cpu, "<", 1.0),
    ("B8 calls/s in turns / one by one (no target)", "turns-pack", "run",
     b8("throughput"), ">=", None),
    ("B9 live call p50 during a re-projection job / idle", "b9-pack", "run",
     figure("b9_live_p50_ratio"), "<=", 1.5),
)  # fmt: skip


#: The commit and command of a set whose runs' JSON has no ``meta`` (a study's own output).
NO_META: dict[str, tuple[str, str]] = {
    "b8-quiet2": (
        "7682cce",
        "python -m bench.studies.b8_reproject --redis-url redis://127.0.0.1:PORT --runs 10000 "
        "--calls 10 --repeat 3 (three times: reproject-run1..3.json)",
    ),
}


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def current_table(runs: list[Any]) -> str:
    """``runs``: every committed run (``Run``: its path under ``bench/`` and its document)."""
    by_set: dict[str, list[Any]] = {}
    for run in runs:
        parts = run.path.split("/")
        by_set.setdefault(parts[1], []).append(run)
    lines = [
        "| figure | median (min-max) | runs | bound | met | set | Redis persistence | commit "
        "| machine |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    commands: dict[str, str] = {}
    for what, name, prefix, extract, op, bound in ROWS:
        chosen = [r for r in by_set.get(name, []) if r.path.split("/")[2].startswith(prefix)]
        values = [v for r in chosen if (v := extract(r.document)) is not None]
        if not values:
            raise ValueError(f"no run of set {name!r} holds {what!r}")
        median = statistics.median(values)
        spread = f"{_num(median)} ({_num(min(values))}-{_num(max(values))})"
        met = "-" if bound is None else ("yes" if meets(median, op, bound) else "**no**")
        metas = [r.document.get("meta", {}) for r in chosen]
        fallback_commit, fallback_command = NO_META.get(name, ("?", ""))
        commits = sorted({m.get("commit", fallback_commit) for m in metas})
        machine, cores = metas[0].get("cpu"), metas[0].get("cores", 2)
        kept = ", ".join(sorted({persistence_label(m.get("persistence")) for m in metas}))
        where = f"{machine}, {cores} cores" if machine else f"{cores} cores"
        lines.append(
            f"| {what} | **{spread}** | {len(values)} | "
            f"{'-' if bound is None else f'{op} {bound:g}'} | {met} | `{name}` | {kept} | "
            f"{', '.join(commits)} | {where} |"
        )
        command = metas[0].get("command", fallback_command)
        if command and name not in commands:
            commands[name] = command
    lines.append("")
    lines.append("The command of each set's first run (the others differ in `runN` only):")
    lines.append("")
    for name, command in commands.items():
        lines.append(f"- `{name}`: `{command}`")
    return "\n".join(lines)
