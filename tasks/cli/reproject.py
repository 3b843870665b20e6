"""``reproject``: reprocess run projections through the workers, one JSON line of facts per
run (``tasks.wiring.reproject`` sends the runs and collects their lines)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from boundary import RedisCanonicalStore
from boundary.reprojection import indexed_runs
from boundary.store.codec import ms
from tasks.cli.common import (
    JsonFlag,
    dumps,
    fail,
    open_out,
    open_store,
    reaching,
    require_id,
    settings_or_fail,
)
from tasks.exits import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE
from tasks.wiring.reproject import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_CHUNK_TIMEOUT_S,
    BatchSummary,
    reproject,
)


def _runs_to_reproject(
    store: RedisCanonicalStore, runs: list[str], all_runs: bool, ttl_s: float
) -> tuple[int, Iterable[str]]:
    """How many runs, and the runs: ``--all`` pages the runs index as the lines go out (a
    million records' run ids are never held at once); ``--run`` ids must all exist."""
    if all_runs:
        return indexed_runs(store.client, now_ms=ms(store.now()), ttl_ms=int(ttl_s * 1000))
    unique = list(dict.fromkeys(runs))
    unknown = [r for r in unique if store.run_summary(r) is None]
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        fail(f"no run {shown} (RECORD_NOT_FOUND); nothing was reprocessed", EXIT_NOT_FOUND)
    return len(unique), unique


def _print_summary(summary: dict[str, Any], as_json: bool, to_stderr: bool) -> None:
    if as_json:
        typer.echo(dumps(summary), err=to_stderr)
        return
    # One row per figure: the by-reason lists can be long, and nine columns do not fit 80.
    table = Table("reprocessed", "", title="reprocessed", title_justify="left", show_header=False)
    failed = ", ".join(f"{k} {v}" for k, v in summary["failed"].items()) or "0"
    excluded = ", ".join(f"{k} {v}" for k, v in summary["excluded"].items()) or "0"
    rows = {
        "runs": str(summary["runs"]),
        "projected": str(summary["projected"]),
        "failed": failed,
        "facts": str(summary["facts"]),
        "evidence": str(summary["evidence"]),
        "negative": str(summary["negative"]),
        "excluded": excluded,
        "omitted": str(summary["omitted"]),
        "elapsed": f"{summary['elapsed_s']:.2f}s",
    }
    for name, value in rows.items():
        table.add_row(name, value)
    Console(stderr=to_stderr, highlight=False).print(table)


def reproject_command(
    *,
    run: Annotated[
        list[str] | None, typer.Option("--run", help="A run to reprocess (repeatable).")
    ] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Every live run (the runs index, page by page).")
    ] = False,
    out: Annotated[
        str, typer.Option("--out", help="File for the JSON lines of facts; - is stdout.")
    ] = "-",
    chunk_size: Annotated[
        int,
        typer.Option(
            "--chunk-size", min=1, help="Runs per project_runs task (one message, one result)."
        ),
    ] = DEFAULT_CHUNK_SIZE,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds to wait for one group.")
    ] = DEFAULT_CHUNK_TIMEOUT_S,
    as_json: JsonFlag = False,
) -> None:
    """Reprocess run projections through Celery workers: one JSON line of facts per run.

    The summary goes to stdout when --out names a file, else to stderr (stdout then holds
    only the JSON lines). Reprocessing only reads: no canonical record changes.
    """
    runs = run or []
    if bool(runs) == all_runs:
        fail("give --run RUN (repeatable) or --all, not both", EXIT_USAGE)
    for run_id in runs:
        require_id(run_id, "run id")
    settings = settings_or_fail()
    started = time.monotonic()
    with reaching(settings):
        total, run_ids = _runs_to_reproject(open_store(settings), runs, all_runs, settings.ttl_s)
        stream = open_out(out)
        err = Console(stderr=True)
        summary = BatchSummary()
        try:
            with Progress(
                TextColumn("reprocessing"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err,
                disable=not err.is_terminal,
            ) as progress:
                bar = progress.add_task("runs", total=total)
                for line in reproject(
                    run_ids,
                    chunk_size=chunk_size,
                    chunk_timeout_s=timeout,
                    on_done=lambda: progress.advance(bar),
                ):
                    stream.write(dumps(line) + "\n")
                    summary.add(line)
        finally:
            if stream is not sys.stdout:
                stream.close()
            else:
                stream.flush()
    totals = summary.as_dict() | {"elapsed_s": round(time.monotonic() - started, 3)}
    _print_summary(totals, as_json, to_stderr=out == "-")
    if summary.failed:
        raise typer.Exit(EXIT_UNAVAILABLE)
