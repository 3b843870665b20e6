"""``watch``: a run's calls in flight as live progress bars, until none is left running."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Column
from rich.text import Text

from boundary import CanonicalRecord, InvocationStatus, RedisCanonicalStore
from tasks.cli.common import (
    JsonFlag,
    RunArg,
    dumps,
    fail,
    open_store,
    printable,
    reaching,
    require_id,
    settings_or_fail,
)
from tasks.exits import EXIT_NOT_FOUND
from tasks.views import call_view, progress_of

#: Seconds between two reads of the run (``--interval``).
DEFAULT_INTERVAL_S = 0.5


def in_flight(store: RedisCanonicalStore, run_id: str) -> list[CanonicalRecord]:
    """The run's PROJECTING calls, in acceptance order (one read of its progress and pending
    sets and their records, no raw responses)."""
    return [
        entry.record
        for entry in store.progress(run_id)
        if entry.record is not None and entry.record.status is InvocationStatus.PROJECTING
    ]


def _age(moment: datetime | None, now: datetime) -> str:
    return "-" if moment is None else f"{max((now - moment).total_seconds(), 0):.0f}s"


#: The bars' width, columns: room for the name and the note at 80 columns.
BAR_WIDTH = 20


def _bars(views: list[dict[str, Any]], now: datetime, records: list[CanonicalRecord]) -> Group:
    bars = Progress(
        TextColumn("{task.fields[name]}"),
        BarColumn(bar_width=BAR_WIDTH),
        TaskProgressColumn(),
        # The note (attempt, times, the tool's message) folds onto more lines rather than
        # being cut where the terminal ends (80 columns).
        TextColumn("{task.fields[note]}", table_column=Column(overflow="fold", ratio=1)),
    )
    for view, record in zip(views, records, strict=True):
        fraction = view["fraction"]
        if not view["started"]:
            note = view["message"] if view["waiting"] else "queued"
        else:
            beat = _age(record.heartbeat_at, now)
            note = f"attempt {view['attempt']}, running {_age(record.started_at, now)}"
            note += f", heartbeat {beat} ago" if record.heartbeat_at else ""
            if view["message"]:
                note += f": {view['message']}"
        # Per mille: rich counts steps in whole numbers.
        bars.add_task(
            "",
            total=None if fraction is None else 1000,
            completed=round((fraction or 0.0) * 1000),
            name=printable(f"{view['tool_call_id']} {view['tool_name']}"),
            note=printable(note),
        )
    return Group(bars)


def watch(
    run_id: RunArg,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.05, help="Seconds between two reads of the run."),
    ] = DEFAULT_INTERVAL_S,
    as_json: JsonFlag = False,
) -> None:
    """The run's calls in flight as live progress bars (fraction, message, attempt, time since
    start and since the last heartbeat), until none is left running. With --json, one JSON
    line per read instead. Ctrl-C stops watching; the calls run on."""
    require_id(run_id, "run id")
    settings = settings_or_fail()
    with reaching(settings):
        store = open_store(settings)
        if store.run_summary(run_id) is None:
            fail(f"no run {run_id} (RECORD_NOT_FOUND)", EXIT_NOT_FOUND)
        console = Console(highlight=False)
        if as_json:
            _watch_json(store, run_id, interval)
            return
        with Live(console=console, auto_refresh=False, transient=True) as live:
            while True:
                records = in_flight(store, run_id)
                if not records:
                    break
                now = datetime.now(UTC)
                views = [call_view(r, now, progress_of(store, r)) for r in records]
                live.update(_bars(views, now, records))
                live.refresh()
                time.sleep(interval)
        summary = store.run_summary(run_id)
    if summary is not None:
        console.print(
            Text(f"run {run_id}: no call running; {summary.ready} ready, {summary.error} error")
        )


def _watch_json(store: RedisCanonicalStore, run_id: str, interval: float) -> None:
    while True:
        now = datetime.now(UTC)
        records = in_flight(store, run_id)
        views = [call_view(r, now, progress_of(store, r)) for r in records]
        typer.echo(dumps({"run_id": run_id, "running": views}))
        if not records:
            return
        time.sleep(interval)
