"""``jobs``, ``jobs show``, ``jobs cancel`` and ``jobs delete``: re-projection jobs (started
by ``reproject --projectors current``, ``tasks.cli.reproject_job``), their state, progress,
versions and failures."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from boundary.reprojection import summary
from boundary.store.redis_jobs import RedisJobs
from tasks.cli.common import (
    JsonFlag,
    dumps,
    fail,
    open_store,
    printable,
    reaching,
    require_id,
    settings_or_fail,
)
from tasks.cli.reproject_job import follow, job_store, job_summary, start_job, tools_table
from tasks.exits import EXIT_NOT_FOUND, EXIT_USAGE
from tasks.worker.chunk_slots import cancel, lane_states, slots_text, slots_view

# ``follow`` and ``start_job`` stay importable from here (the bench uses them).
__all__ = ["follow", "jobs_app", "start_job"]


def _cell(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "0"
    return str(value)


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
    return job_store(open_store(settings), settings)


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
    table = Table(
        "job", "state", "runs", "records", "records changed", "failed", "versions", "created"
    )
    for job, row in zip(found, rows, strict=True):
        table.add_row(
            Text(job.job_id),
            row["state"],
            str(row["runs"]),
            str(row["records"]),
            str(row["records_changed"]),
            str(row["failed"]),
            Text(printable("; ".join(f"{t}: {v}" for t, v in row["versions"].items()))),
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
        jobs = job_store(store, settings)
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
        if name not in ("tools", "versions"):
            table.add_row(name, Text(printable(_cell(value))))
    console = Console(highlight=False)
    console.print(table)
    if view["summary"]["tools"]:
        console.print(tools_table(view["summary"]))


@jobs_app.command("cancel")
def jobs_cancel(job_id: JobArg) -> None:
    """Stops a running job: each lane stops at its next checkpoint (within one chunk); its
    lanes waiting for a slot of the cap leave the line and stop at once."""
    require_id(job_id, "job id")
    settings = settings_or_fail()
    with reaching(settings):
        store = open_store(settings)
        jobs = job_store(store, settings)
        state = cancel(store, jobs, job_id)
        after = jobs.get(job_id) if state == "running" else None
    if state is None:
        fail(f"no job {job_id} (JOB_NOT_FOUND)", EXIT_NOT_FOUND)
    if state == "running" and after is not None and after.state == "cancelled":
        typer.echo(f"job {job_id}: cancelled (no worker had taken it)")
    elif state == "running":
        typer.echo(f"job {job_id}: cancelling (stops within one chunk)")
    else:
        typer.echo(f"job {job_id} is {state} already")


@jobs_app.command("delete")
def jobs_delete(job_id: JobArg) -> None:
    """Removes a finished job and all it kept (its hash, report lines, index entry); a
    running job is refused (cancel it first)."""
    require_id(job_id, "job id")
    settings = settings_or_fail()
    with reaching(settings):
        state = job_store(open_store(settings), settings).delete(job_id)
    if state is None:
        fail(f"no job {job_id} (JOB_NOT_FOUND)", EXIT_NOT_FOUND)
    if state == "running":
        fail(f"job {job_id} is running: cancel it first (jobs cancel {job_id})", EXIT_USAGE)
    typer.echo(f"job {job_id} ({state}) deleted")
