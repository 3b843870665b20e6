"""``reproject`` with selectors, current projectors and jobs; ``jobs``, ``jobs show``,
``jobs cancel``.

``reproject --projectors sealed`` (the default) reads the sealed projections as before
(``tasks.cli.reproject.reproject_command``). ``--projectors current`` starts a job
(``tasks.worker.jobs``) that
projects each selected record again in the workers and follows it: each run's line (its diff)
as the job's chunks are checkpointed, then the summary. The job lives in Redis and runs in the
workers: Ctrl-C (or ``--detach``) leaves it running; ``--job ID`` follows it again (and resumes
a lane whose worker died), ``jobs cancel ID`` stops it within one chunk.
"""

from __future__ import annotations

import secrets
import sys
import time
from datetime import UTC, datetime
from typing import IO, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from boundary import RedisCanonicalStore
from boundary.reprojection import SELECTABLE_STATUSES, Selection, count, first_cursor, summary
from boundary.store.codec import ms
from boundary.store.redis_jobs import Job, RedisJobs
from tasks.cli.common import (
    JsonFlag,
    dumps,
    fail,
    open_out,
    open_store,
    printable,
    reaching,
    require_id,
    settings_or_fail,
)
from tasks.exits import EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE
from tasks.settings import Settings
from tasks.wiring.reproject import ReprojectError
from tasks.worker.chunk_slots import cancel, lane_states, slots_text, slots_view
from tasks.worker.jobs import DEFAULT_CHUNK_RUNS, DEFAULT_LANES, send_lanes

#: Lines read from a job's stream per round trip while following it.
FOLLOW_BATCH = 1000
#: Longest wait for new lines in one read, ms (then the job's state is read).
FOLLOW_BLOCK_MS = 500

ProjectorsOption = Annotated[
    str,
    typer.Option(
        "--projectors",
        help="sealed: read the sealed projections; current: project each selected record "
        "again from its raw response with its tool's current projector (a job).",
    ),
]


def _moment(text: str | None, option: str) -> int | None:
    """Epoch ms of ``--since``/``--until``: ISO 8601 (UTC when no offset) or epoch seconds."""
    if text is None:
        return None
    try:
        return int(float(text) * 1000)
    except ValueError:
        pass
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
    if len(pair) != 2 or pair[0] <= 0 or pair[1] <= 0:
        fail(f"--rate {text!r} is not N/PERIOD_S (records per period, seconds)", EXIT_USAGE)
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
    implied) or a bad value."""
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
    return selection


def new_job_id() -> str:
    return f"rp-{datetime.now(UTC):%Y%m%d%H%M%S}-{secrets.token_hex(3)}"


def start_job(
    store: RedisCanonicalStore,
    settings: Settings,
    job_id: str,
    selection: Selection,
    *,
    write: bool,
    rate: list[float] | None,
    chunk: int,
    lanes: int,
) -> tuple[bool, Job]:
    """Creates job ``job_id`` and sends its lanes, or finds the job with that id and sends
    its lanes that have not ended (a resume: harmless when they run). Times are the store's
    clock (the runs index is scored on it)."""
    jobs = RedisJobs.of(store)
    assert jobs is not None
    now_ms = ms(store.now())
    ttl_ms = int(settings.ttl_s * 1000)
    spec = {
        "selection": selection.as_json(),
        "projectors": "current",
        "write": write,
        "rate": rate,
        "chunk": chunk,
        # Runs that take a call after the job started are left to a later job.
        "high_ms": now_ms + ttl_ms,
    }
    cursor = first_cursor(selection, now_ms=now_ms, ttl_ms=ttl_ms)
    created, job = jobs.start(job_id, spec, lanes, cursor)
    try:
        send_lanes(job)
    except Exception:
        # kombu's errors name the broker URL: none of it goes further.
        raise ReprojectError("broker") from None
    return created, job


def follow(
    jobs: RedisJobs, job_id: str, stream: IO[str], stall_s: float
) -> tuple[Job | None, int, bool]:
    """Writes the job's report lines to ``stream`` as they come, from its first, until the
    job has ended and every line is read: the job at its end, the lines written, and whether
    it was left because it made no progress for ``stall_s`` (no worker takes its chunks)."""
    after, written = "0", 0
    err = Console(stderr=True)
    shown = moved = time.monotonic()
    last_update: int | None = None
    while True:
        got = jobs.lines(job_id, after, count=FOLLOW_BATCH, block_ms=FOLLOW_BLOCK_MS)
        for entry_id, line in got:
            stream.write(line + "\n")
            after = entry_id
        written += len(got)
        if got:
            moved = time.monotonic()
            if err.is_terminal and moved - shown > 1:
                err.print(f"reprocessing: {written} runs", highlight=False)
                shown = moved
            continue
        job = jobs.get(job_id)
        if job is None or not job.active:
            # Its last checkpoint wrote its last lines in the same step: read what is left.
            rest = jobs.lines(job_id, after, count=FOLLOW_BATCH)
            while rest:
                for entry_id, line in rest:
                    stream.write(line + "\n")
                    after = entry_id
                written += len(rest)
                rest = jobs.lines(job_id, after, count=FOLLOW_BATCH)
            return job, written, False
        if job.updated_at_ms != last_update:
            last_update, moved = job.updated_at_ms, time.monotonic()
        elif time.monotonic() - moved > stall_s:
            return job, written, True


def job_summary(job: Job, lines: int | None = None) -> dict[str, Any]:
    out = {"job_id": job.job_id, "state": job.as_dict()["state"]} | summary(job.totals)
    if lines is not None:
        expected = out["runs"] + out["unreadable_runs"]
        if lines < expected:
            out["lines_trimmed"] = expected - lines
    return out


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "0"
    return str(value)


def _print_summary(totals: dict[str, Any], as_json: bool, to_stderr: bool) -> None:
    if as_json:
        typer.echo(dumps(totals), err=to_stderr)
        return
    table = Table(show_header=False, title="re-projected", title_justify="left")
    for name, value in totals.items():
        table.add_row(name, Text(printable(_cell(value))))
    Console(stderr=to_stderr, highlight=False).print(table)


def reproject_current(
    settings: Settings,
    selection: Selection,
    *,
    job_id: str | None,
    write: bool,
    rate: list[float] | None,
    chunk: int,
    lanes: int,
    detach: bool,
    out: str,
    as_json: bool,
    stall_s: float,
) -> None:
    """``reproject --projectors current``: starts (or follows) the job and reports it."""
    job_id = require_id(job_id, "job id") if job_id else new_job_id()
    store = open_store(settings)
    jobs = RedisJobs.of(store)
    assert jobs is not None
    created, job = start_job(
        store, settings, job_id, selection, write=write, rate=rate, chunk=chunk, lanes=lanes
    )
    if not created:
        same = job.spec.get("selection") == selection.as_json() and job.spec.get("write") == write
        note = "" if same else " (with its own selection and options)"
        typer.echo(f"job {job_id} exists: following it{note}", err=True)
    else:
        typer.echo(f"job {job_id} started", err=True)
    if detach:
        typer.echo(dumps({"job_id": job_id, "created": created}))
        return
    stream = open_out(out)
    try:
        ended, lines, stalled = follow(jobs, job_id, stream, stall_s)
    finally:
        if stream is not sys.stdout:
            stream.close()
        else:
            stream.flush()
    if ended is None:
        fail(f"job {job_id} expired while it was followed", EXIT_NOT_FOUND)
    if stalled:
        fail(
            f"job {job_id} made no progress in {stall_s:g}s (is a worker consuming the "
            f"reprojections queue?); it stays: follow it again with --job {job_id}",
            EXIT_UNAVAILABLE,
        )
    _print_summary(job_summary(ended, lines), as_json, to_stderr=out == "-")
    if ended.state == "cancelled":
        raise typer.Exit(EXIT_INTERRUPTED)
    if ended.state == "failed":
        raise typer.Exit(EXIT_UNAVAILABLE)


def reproject_command(
    *,
    run: Annotated[
        list[str] | None, typer.Option("--run", help="A run to reprocess (repeatable).")
    ] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Every live run (the runs index).")
    ] = False,
    tool: Annotated[
        list[str] | None,
        typer.Option("--tool", help="Only this tool's records (repeatable; current only)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Records accepted at or after (ISO 8601 or epoch s)."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Records accepted at or before (ISO 8601 or epoch s)."),
    ] = None,
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="Only records sealed READY or ERROR (repeatable)."),
    ] = None,
    projectors: ProjectorsOption = "sealed",
    write: Annotated[
        bool,
        typer.Option(
            "--write", help="Keep each new projection as a side projection (current only)."
        ),
    ] = False,
    job: Annotated[
        str | None,
        typer.Option("--job", help="The job's id: the same id again follows the same job."),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option("--rate", help="At most N records per PERIOD_S seconds (N/PERIOD_S)."),
    ] = None,
    lanes: Annotated[
        int, typer.Option("--lanes", min=1, max=64, help="Chunks of the job at once.")
    ] = DEFAULT_LANES,
    count_only: Annotated[
        bool,
        typer.Option("--count", help="Only count the selection's runs and records (the index)."),
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Start the job and exit; follow it with --job ID.")
    ] = False,
    out: Annotated[str, typer.Option("--out", help="File for the JSON lines; - is stdout.")] = "-",
    chunk_size: Annotated[
        int, typer.Option("--chunk-size", min=1, help="Runs per chunk (one task).")
    ] = DEFAULT_CHUNK_RUNS,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.1,
            help="Seconds to wait for one chunk (sealed), or for a job's progress (current).",
        ),
    ] = 300.0,
    as_json: JsonFlag = False,
) -> None:
    """Reprocess run projections through Celery workers: one JSON line per run.

    `--projectors sealed` (default) reads the sealed projections: each line is the run's
    facts. `--projectors current` projects each selected record again from its raw response
    with its tool's current projector, in the workers (queue `reprojections`), as a job:
    each line is the run's diff (facts added, removed, changed; records that now fail). A dry
    run unless `--write`. The sealed records never change. No selector is an error: `--all`
    must be explicit.
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
            now_ms = ms(store.now())
            counted = count(
                store.client, selection, now_ms=now_ms, ttl_ms=int(settings.ttl_s * 1000)
            )
        bound = "" if counted["exact"] else " at most"
        text = f"{counted['runs']} runs, {counted['records']} records{bound}"
        typer.echo(dumps(counted) if as_json else text)
        return
    if projectors == "sealed":
        extra = selection.tools or selection.statuses or selection.since_ms or selection.until_ms
        if extra or write or job or rate or detach:
            fail(
                "--tool, --status, --since, --until, --write, --job, --rate and --detach "
                "need --projectors current",
                EXIT_USAGE,
            )
        # Imported here: ``tasks.cli`` registers this command.
        from tasks.cli.reproject import reproject_command as reproject_sealed

        reproject_sealed(
            run=list(selection.runs) or None,
            all_runs=selection.all,
            out=out,
            chunk_size=chunk_size,
            timeout=timeout,
            as_json=as_json,
        )
        return
    with reaching(settings):
        reproject_current(
            settings,
            selection,
            job_id=job,
            write=write,
            rate=parsed_rate,
            chunk=chunk_size,
            lanes=lanes,
            detach=detach,
            out=out,
            as_json=as_json,
            stall_s=timeout,
        )


# --- jobs ---------------------------------------------------------------------------------

jobs_app = typer.Typer(
    name="jobs",
    help="Re-projection jobs: their state and progress; cancel one.",
    no_args_is_help=False,
    invoke_without_command=True,
    rich_markup_mode="markdown",
)

JobArg = Annotated[str, typer.Argument(help="The job's id.", show_default=False)]


def _jobs_or_fail() -> RedisJobs:
    settings = settings_or_fail()
    jobs = RedisJobs.of(open_store(settings))
    assert jobs is not None
    return jobs


def _when(epoch_ms: int | None) -> str:
    if not epoch_ms:
        return "-"
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="seconds")


@jobs_app.callback()
def jobs_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """The newest jobs with their state and progress (`jobs show ID` for one)."""
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_or_fail()
    with reaching(settings):
        found = _jobs_or_fail().recent()
    rows = [job_summary(job) for job in found]
    if as_json:
        typer.echo(dumps(rows))
        return
    if not rows:
        typer.echo("no jobs")
        return
    table = Table("job", "state", "runs", "records", "changed", "failed", "created")
    for job, row in zip(found, rows, strict=True):
        table.add_row(
            Text(job.job_id),
            row["state"],
            str(row["runs"]),
            str(row["records"]),
            str(row["records_changed"]),
            str(row["failed"]),
            _when(job.created_at_ms),
        )
    Console(highlight=False).print(table)


@jobs_app.command("show")
def jobs_show(job_id: JobArg, as_json: JsonFlag = False) -> None:
    """One job: its selection, state, lanes, chunks done and totals."""
    require_id(job_id, "job id")
    settings = settings_or_fail()
    with reaching(settings):
        store = open_store(settings)
        jobs = RedisJobs.of(store)
        assert jobs is not None
        job = jobs.get(job_id)
        states = lane_states(store.flow_ops, job) if job is not None else {}
    if job is None:
        fail(f"no job {job_id} (JOB_NOT_FOUND)", EXIT_NOT_FOUND)
    view = job.as_dict() | {"summary": summary(job.totals)}
    if states:
        view["slots"] = slots_view(states)
    if as_json:
        typer.echo(dumps(view))
        return
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("job", Text(job.job_id))
    table.add_row("state", view["state"])
    table.add_row("selection", Text(printable(dumps(job.spec.get("selection", {})))))
    table.add_row("write", str(bool(job.spec.get("write"))))
    table.add_row("lanes", f"{job.lanes_ended} of {job.lanes} ended")
    if "slots" in view:
        table.add_row("slots", slots_text(view["slots"]))
    table.add_row("chunks", str(job.chunks))
    table.add_row("created", _when(job.created_at_ms))
    table.add_row("updated", _when(job.updated_at_ms))
    table.add_row("finished", _when(job.finished_at_ms))
    for name, value in view["summary"].items():
        table.add_row(name, _cell(value))
    Console(highlight=False).print(table)


@jobs_app.command("cancel")
def jobs_cancel(job_id: JobArg) -> None:
    """Stops a running job: each lane stops at its next checkpoint (within one chunk); its
    lanes waiting for a slot of the cap leave the line and stop at once."""
    require_id(job_id, "job id")
    settings = settings_or_fail()
    with reaching(settings):
        store = open_store(settings)
        jobs = RedisJobs.of(store)
        assert jobs is not None
        state = cancel(store, jobs, job_id)
    if state is None:
        fail(f"no job {job_id} (JOB_NOT_FOUND)", EXIT_NOT_FOUND)
    if state == "running":
        typer.echo(f"job {job_id}: cancelling (stops within one chunk)")
    else:
        typer.echo(f"job {job_id} is {state} already")
