"""``reproject``: its options (declared once, here), the checks that run before anything
starts, and its two modes. ``--projectors sealed`` (the default) reads the sealed projections:
one JSON line of facts per run (``tasks.wiring.reproject`` sends the runs and collects their
lines). ``--projectors current`` runs a job in the workers (``tasks.cli.reproject_job``).

Every bad input is refused with one line before a job exists: a bad option or time range
(exit 2), an unknown run or tool (exit 1), an unwritable ``--out`` (exit 2), no worker on the
``reprojections`` queue (exit 3, unless ``--detach``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import IO, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from boundary import RedisCanonicalStore
from boundary.reprojection import SELECTABLE_STATUSES, Selection, count, indexed_runs
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
from tasks.cli.reproject_job import Following, new_job_id, run_job, start_job
from tasks.exits import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE
from tasks.runtime import registry_or_empty
from tasks.settings import Settings
from tasks.wiring.reproject import DEFAULT_CHUNK_TIMEOUT_S, BatchSummary, reproject
from tasks.worker.jobs import DEFAULT_CHUNK_RUNS, DEFAULT_LANES

#: Bounds of the options (documented in ``--help``): beyond them, exit 2 before anything.
MAX_CHUNK_RUNS = 10_000
MAX_TIMEOUT_S = 86_400.0
MAX_RATE_LIMIT = 1_000_000.0
MAX_RATE_PERIOD_S = 86_400.0
MAX_LIMIT = 10_000
#: Epoch seconds of ``--since``/``--until``: from 1970 up to the last second of year 9999.
MAX_EPOCH_S = 253_402_300_799

RunOption = Annotated[
    list[str] | None, typer.Option("--run", help="A run to reprocess (repeatable).")
]
AllOption = Annotated[bool, typer.Option("--all", help="Every live run (the runs index).")]
ToolOption = Annotated[
    list[str] | None,
    typer.Option("--tool", help="Only this tool's records (repeatable; current only)."),
]
SinceOption = Annotated[
    str | None,
    typer.Option("--since", help="Records accepted at or after (ISO 8601 or epoch s)."),
]
UntilOption = Annotated[
    str | None,
    typer.Option("--until", help="Records accepted at or before (ISO 8601 or epoch s)."),
]
StatusOption = Annotated[
    list[str] | None,
    typer.Option("--status", help="Only records sealed READY or ERROR (repeatable)."),
]
ProjectorsOption = Annotated[
    str,
    typer.Option(
        "--projectors",
        help="sealed: read the sealed projections; current: project each selected record "
        "again from its raw response with its tool's current projector (a job).",
    ),
]
WriteOption = Annotated[
    bool,
    typer.Option(
        "--write",
        help="Keep each new projection as a side projection (current only; not for a "
        "version equal to the sealed one, never a failed one).",
    ),
]
JobOption = Annotated[
    str | None,
    typer.Option("--job", help="The job's id: the same id again follows the same job."),
]
RateOption = Annotated[
    str | None,
    typer.Option(
        "--rate", help="At most N records per PERIOD_S seconds (N/PERIOD_S; N <= 1,000,000)."
    ),
]
LanesOption = Annotated[
    int, typer.Option("--lanes", min=1, max=64, help="Chunks of the job at once.")
]
CountOption = Annotated[
    bool,
    typer.Option("--count", help="Only count the selection's runs and records (the index)."),
]
DetachOption = Annotated[
    bool, typer.Option("--detach", help="Start the job and exit; follow it with --job ID.")
]
OutOption = Annotated[str, typer.Option("--out", help="File for the JSON lines; - is stdout.")]
ChunkOption = Annotated[
    int,
    typer.Option("--chunk-size", min=1, max=MAX_CHUNK_RUNS, help="Runs per chunk (one task)."),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0.1,
        max=MAX_TIMEOUT_S,
        help="Seconds to wait for one chunk (sealed), or for a job's progress (current).",
    ),
]
FullOption = Annotated[
    bool,
    typer.Option("--full", help="A changed result shows both whole objects besides its patch."),
]
LimitOption = Annotated[
    int,
    typer.Option(
        "--limit", min=0, max=MAX_LIMIT, help="Evidence flips listed on a terminal (current)."
    ),
]


def _moment(text: str | None, option: str) -> int | None:
    """Epoch ms of ``--since``/``--until``: ISO 8601 (UTC when no offset) or epoch seconds
    (0 to the end of year 9999)."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or not 0 <= seconds <= MAX_EPOCH_S:
            fail(f"{option} {text!r} is outside 0 .. {MAX_EPOCH_S} epoch seconds", EXIT_USAGE)
        return int(seconds * 1000)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        fail(f"{option} {text!r} is neither ISO 8601 nor epoch seconds", EXIT_USAGE)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return ms(moment)


def _rate(text: str | None) -> list[float] | None:
    if text is None:
        return None
    limit, _, period = text.partition("/")
    try:
        pair = [float(limit), float(period or 1)]
    except ValueError:
        pair = []
    if len(pair) != 2 or not 0 < pair[0] <= MAX_RATE_LIMIT or not 0 < pair[1] <= MAX_RATE_PERIOD_S:
        fail(
            f"--rate {text!r} is not N/PERIOD_S (records per period: N up to "
            f"{MAX_RATE_LIMIT:,.0f}, PERIOD_S up to {MAX_RATE_PERIOD_S:,.0f} seconds)",
            EXIT_USAGE,
        )
    return pair


def selection_of(
    *,
    runs: list[str],
    all_runs: bool,
    tools: list[str],
    since: str | None,
    until: str | None,
    statuses: list[str],
) -> Selection:
    """The selection the options name; exits ``EXIT_USAGE`` for none (``--all`` is never
    implied), a bad value, or an empty or reversed time range."""
    for run_id in runs:
        require_id(run_id, "run id")
    upper = [s.upper() for s in statuses]
    bad = [s for s in upper if s not in SELECTABLE_STATUSES]
    if bad:
        fail(f"--status {bad[0]} is not one of {', '.join(SELECTABLE_STATUSES)}", EXIT_USAGE)
    if runs and all_runs:
        fail("give --run RUN (repeatable) or --all, not both", EXIT_USAGE)
    selection = Selection(
        runs=tuple(dict.fromkeys(runs)),
        all=all_runs,
        tools=tuple(dict.fromkeys(tools)),
        since_ms=_moment(since, "--since"),
        until_ms=_moment(until, "--until"),
        statuses=tuple(dict.fromkeys(upper)),
    )
    if selection.empty:
        fail(
            "no selection: give --run RUN, --tool NAME, --since/--until, --status, "
            "or --all for every run",
            EXIT_USAGE,
        )
    low, high = selection.since_ms, selection.until_ms
    if low is not None and high is not None and low > high:
        fail(f"--since {since} is after --until {until}: the range is empty", EXIT_USAGE)
    return selection


def _known_runs(store: RedisCanonicalStore, runs: Iterable[str]) -> None:
    """Every ``--run`` exists, or exit 1 naming the first unknown ones."""
    unknown = [r for r in runs if store.run_summary(r) is None]
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        fail(f"no run {shown} (RECORD_NOT_FOUND); nothing was reprocessed", EXIT_NOT_FOUND)


def _known_tools(store: RedisCanonicalStore, settings: Settings, tools: Iterable[str]) -> None:
    """Every ``--tool`` is in the registry or some live run's counters know it, or exit 1."""
    registry = registry_or_empty(settings)
    now_ms, ttl_ms = ms(store.now()), int(settings.ttl_s * 1000)
    for tool in tools:
        if registry.get(tool) is not None:
            continue
        found = count(store.client, Selection(tools=(tool,)), now_ms=now_ms, ttl_ms=ttl_ms)
        if not found["records"]:
            fail(
                f"no tool {tool!r}: not in TOOL_BOUNDARY_TOOLS and no live record has it",
                EXIT_NOT_FOUND,
            )


def _workers_up() -> None:
    """Some worker consumes the ``reprojections`` queue, or exit 3 (as ``demo --no-worker``)."""
    from tasks.wiring.app import REPROJECTIONS_QUEUE, app
    from tasks.wiring.services import check_workers

    check_workers(app, queues=(REPROJECTIONS_QUEUE,))


def reproject_command(
    *,
    run: RunOption = None,
    all_runs: AllOption = False,
    tool: ToolOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    status: StatusOption = None,
    projectors: ProjectorsOption = "sealed",
    write: WriteOption = False,
    job: JobOption = None,
    rate: RateOption = None,
    lanes: LanesOption = DEFAULT_LANES,
    count_only: CountOption = False,
    detach: DetachOption = False,
    out: OutOption = "-",
    chunk_size: ChunkOption = DEFAULT_CHUNK_RUNS,
    timeout: TimeoutOption = DEFAULT_CHUNK_TIMEOUT_S,
    full: FullOption = False,
    limit: LimitOption = 20,
    as_json: JsonFlag = False,
) -> None:
    """Reprocess run projections through Celery workers.

    `--projectors sealed` (default) reads the sealed projections: one JSON line of facts per
    run. `--projectors current` projects each selected record again from its raw response
    with its tool's current projector, in the workers (queue `reprojections`), as a job: on a
    terminal a table per tool and the first evidence flips; with `--json`, `--out` or a pipe
    one JSON line per run (its diff). A dry run unless `--write`. The sealed records never
    change. No selector is an error: `--all` must be explicit. Exit 5: the job ended with
    projection failures; 6: it was cancelled elsewhere.
    """
    if projectors not in ("sealed", "current"):
        fail("--projectors is sealed or current", EXIT_USAGE)
    selection = selection_of(
        runs=run or [],
        all_runs=all_runs,
        tools=tool or [],
        since=since,
        until=until,
        statuses=status or [],
    )
    parsed_rate = _rate(rate)
    settings = settings_or_fail()
    if count_only:
        with reaching(settings):
            store = open_store(settings)
            counted = count(
                store.client, selection, now_ms=ms(store.now()), ttl_ms=int(settings.ttl_s * 1000)
            )
        bound = "" if counted["exact"] else " at most"
        text = f"{counted['runs']} runs, {counted['records']} records{bound}"
        typer.echo(dumps(counted) if as_json else text)
        return
    if projectors == "sealed":
        extra = selection.tools or selection.statuses or selection.since_ms or selection.until_ms
        if extra or write or job or rate or detach or full:
            fail(
                "--tool, --status, --since, --until, --write, --job, --rate, --detach and "
                "--full need --projectors current",
                EXIT_USAGE,
            )
        reproject_sealed(
            settings,
            selection=selection,
            out=out,
            chunk_size=chunk_size,
            timeout=timeout,
            as_json=as_json,
        )
        return
    job_id = require_id(job, "job id") if job else new_job_id()
    with reaching(settings):
        store = open_store(settings)
        _known_runs(store, selection.runs)
        _known_tools(store, settings, selection.tools)
        total = count(
            store.client, selection, now_ms=ms(store.now()), ttl_ms=int(settings.ttl_s * 1000)
        )
        stream: IO[str] | None = None
        human = out == "-" and not as_json and sys.stdout.isatty()
        if not detach and not human:
            stream = open_out(out)
        if not detach:
            _workers_up()
        created, started = start_job(
            store, settings, job_id, selection,
            write=write, rate=parsed_rate, chunk=chunk_size, lanes=lanes, full=full,
            total_runs=total["runs"],
        )  # fmt: skip
        if not created:
            same = (
                started.spec.get("selection") == selection.as_json()
                and started.spec.get("write") == write
            )
            note = "" if same else " (with its own selection and options)"
            typer.echo(f"job {job_id} exists: following it{note}", err=True)
        else:
            typer.echo(f"job {job_id} started: {total['runs']} runs", err=True)
        if detach:
            typer.echo(dumps({"job_id": job_id, "created": created}))
            return
        how = Following(
            out=out,
            as_json=as_json,
            stall_s=timeout,
            human=human,
            limit=limit,
            total=started.spec.get("total_runs") or None,
            full=full,
        )
        registry = registry_or_empty(settings)
        run_job(store, settings=settings, registry=registry, job_id=job_id, how=how, stream=stream)


# --- --projectors sealed -------------------------------------------------------------------


def _runs_to_reproject(
    store: RedisCanonicalStore, selection: Selection, ttl_s: float
) -> tuple[int, Iterable[str]]:
    """How many runs, and the runs: ``--all`` pages the runs index as the lines go out (a
    million records' run ids are never held at once); ``--run`` ids must all exist."""
    if selection.all:
        return indexed_runs(store.client, now_ms=ms(store.now()), ttl_ms=int(ttl_s * 1000))
    _known_runs(store, selection.runs)
    return len(selection.runs), selection.runs


def _print_sealed_summary(summary: dict[str, Any], as_json: bool, to_stderr: bool) -> None:
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


def reproject_sealed(
    settings: Settings,
    *,
    selection: Selection,
    out: str,
    chunk_size: int,
    timeout: float,
    as_json: bool,
) -> None:
    """``reproject --projectors sealed``: one JSON line of facts per run. The summary goes to
    stdout when --out names a file, else to stderr (stdout then holds only the JSON lines).
    Reprocessing only reads: no canonical record changes."""
    started = time.monotonic()
    with reaching(settings):
        total, run_ids = _runs_to_reproject(open_store(settings), selection, settings.ttl_s)
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
    _print_sealed_summary(totals, as_json, to_stderr=out == "-")
    if summary.failed:
        raise typer.Exit(EXIT_UNAVAILABLE)
