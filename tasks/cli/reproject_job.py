"""``reproject --projectors current``: starts a job (``tasks.worker.jobs``) that projects each
selected record again in the workers, follows it (each run's line as the job's chunks are
checkpointed, with progress on a terminal), then reports it: on a terminal a table per tool
and the first evidence flips; JSON lines for ``--json``, ``--out`` and pipes.

The job lives in Redis and runs in the workers: Ctrl-C (or ``--detach``) leaves it running;
``--job ID`` follows it again (and resumes a lane whose worker died), ``jobs cancel ID``
stops it within one chunk.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from boundary import RedisCanonicalStore
from boundary.registry import ToolRegistry
from boundary.reprojection import Selection, first_cursor, readable_changes, summary
from boundary.store.codec import ms
from boundary.store.redis_jobs import Job, RedisJobs
from tasks.cli.common import dumps, fail, printable
from tasks.cli.interrupts import interrupt_note
from tasks.exits import (
    EXIT_CANCELLED,
    EXIT_NOT_FOUND,
    EXIT_PROJECTIONS_FAILED,
    EXIT_UNAVAILABLE,
)
from tasks.settings import Settings
from tasks.wiring.reproject import ReprojectError
from tasks.worker.jobs import jobs_of, pace_s, send_lanes

#: Lines read from a job's stream per round trip while following it.
FOLLOW_BATCH = 1000
#: Longest wait for new lines in one read, ms (then the job's state is read).
FOLLOW_BLOCK_MS = 500
#: Seconds between two progress lines on a terminal.
PROGRESS_EVERY_S = 2.0


def new_job_id() -> str:
    return f"rp-{datetime.now(UTC):%Y%m%d%H%M%S}-{secrets.token_hex(3)}"


def job_store(store: RedisCanonicalStore, settings: Settings) -> RedisJobs:
    jobs = jobs_of(store, settings)
    assert jobs is not None
    return jobs


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
    full: bool = False,
    total_runs: int | None = None,
) -> tuple[bool, Job]:
    """Creates job ``job_id`` and sends its lanes, or finds the job with that id and sends
    its lanes that have not ended (a resume: harmless when they run). Times are the store's
    clock (the runs index is scored on it)."""
    jobs = job_store(store, settings)
    now_ms = ms(store.now())
    ttl_ms = int(settings.ttl_s * 1000)
    spec = {
        "selection": selection.as_json(),
        "projectors": "current",
        "write": write,
        "full": full,
        "rate": rate,
        "chunk": chunk,
        "total_runs": total_runs,
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


def progress_text(job: Job, total: int | None, started: float, now_s: float | None = None) -> str:
    """``reprocessing: 300 of 657 runs (45%), about 12s left``; a paced job (``--rate``)
    says when its next chunk starts (``next chunk at about 12:00:30 UTC``), or that it is due
    (its countdown has run out: a chunk is at work or waits for a worker). ``now_s``: the
    time, epoch seconds (the clock's by default)."""
    done = int(job.totals.get("runs", 0))
    text = f"reprocessing: {done} runs"
    if total:
        text = f"reprocessing: {done} of {total} runs ({100 * done // max(total, 1)}%)"
        elapsed = time.monotonic() - started
        if 0 < done < total:
            text += f", about {elapsed * (total - done) / done:.0f}s left"
    rate = job.spec.get("rate")
    if rate and job.chunks:
        per_chunk = int(job.totals.get("records", 0)) / job.chunks
        next_at = job.updated_at_ms / 1000 + pace_s(job.spec, job.lanes, round(per_chunk))
        paced = f"; paced by --rate {rate[0]:g}/{rate[1]:g}: next chunk"
        if next_at > (time.time() if now_s is None else now_s):
            when = datetime.fromtimestamp(next_at, tz=UTC).strftime("%H:%M:%S")
            text += f"{paced} at about {when} UTC"
        else:
            text += f"{paced} due now"
    return text


def follow(
    jobs: RedisJobs,
    job_id: str,
    stream: IO[str] | None,
    stall_s: float,
    *,
    total: int | None = None,
    on_line: Callable[[str], None] | None = None,
    as_shown: Callable[[str], str] | None = None,
) -> tuple[Job | None, int, bool]:
    """Writes the job's report lines to ``stream`` (and hands each to ``on_line``) as they
    come, from its first, until the job has ended and every line is read: the job at its end,
    the lines read, and whether it was left because it made no progress for ``stall_s`` (no
    worker takes its chunks). ``as_shown`` turns a line into what ``stream`` gets. On a terminal,
    a progress line every few seconds."""
    after, written = "0", 0
    err = Console(stderr=True, highlight=False)
    started = shown = moved = time.monotonic()
    last_update: int | None = None

    def take(got: list[tuple[str, str]]) -> None:
        nonlocal after, written
        for entry_id, line in got:
            if stream is not None:
                stream.write((as_shown(line) if as_shown is not None else line) + "\n")
            if on_line is not None:
                on_line(line)
            after = entry_id
        written += len(got)

    while True:
        got = jobs.lines(job_id, after, count=FOLLOW_BATCH, block_ms=FOLLOW_BLOCK_MS)
        take(got)
        now = time.monotonic()
        if got:
            moved = now
        if err.is_terminal and now - shown > PROGRESS_EVERY_S:
            job = jobs.get(job_id)
            if job is not None:
                err.print(progress_text(job, total, started))
            shown = now
        if got:
            continue
        job = jobs.get(job_id)
        if job is None or not job.active:
            # Its last checkpoint wrote its last lines in the same step: read what is left.
            rest = jobs.lines(job_id, after, count=FOLLOW_BATCH)
            while rest:
                take(rest)
                rest = jobs.lines(job_id, after, count=FOLLOW_BATCH)
            return job, written, False
        if job.updated_at_ms != last_update:
            last_update, moved = job.updated_at_ms, time.monotonic()
        elif time.monotonic() - moved > stall_s:
            return job, written, True


def readable(full: bool) -> Callable[[str], str]:
    """A report line as ``--json``, ``--out`` and pipes get it: a changed result as a JSON
    Patch (``boundary.reprojection.readable_changes``), ASCII-only with sorted keys."""

    def shown(text: str) -> str:
        try:
            line = json.loads(text)
        except ValueError:
            return text
        return dumps(readable_changes(line, full=full))

    return shown


def job_summary(job: Job, lines: int | None = None) -> dict[str, Any]:
    out = {"job_id": job.job_id, "state": job.as_dict()["state"]} | summary(job.totals)
    if job.lines_trimmed:
        out["lines_trimmed"] = job.lines_trimmed
    elif lines is not None:
        expected = out["runs"] + out["unreadable_runs"]
        if lines < expected and not Selection.from_json(job.spec.get("selection", {})).filtered:
            out["lines_trimmed"] = expected - lines
    return out


@dataclass
class Flips:
    """The first ``limit`` evidence flips of a job's lines (``run/call: A -> B``)."""

    limit: int
    shown: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        if len(self.shown) >= self.limit or '"evidence_status"' not in text:
            return
        try:
            line = json.loads(text)
        except ValueError:
            return
        for change in (line.get("diff") or {}).get("changed", ()):
            if change.get("field") == "evidence_status" and len(self.shown) < self.limit:
                where = f"{line.get('run_id')}/{change.get('tool_call_id')}"
                self.shown.append(f"{where}: {change.get('before')} -> {change.get('after')}")


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "0"
    return str(value)


def tools_table(totals: dict[str, Any]) -> Table:
    """A row per tool: records, changed, evidence flips by direction, failed by exception
    type, versions compared."""
    table = Table(
        "tool", "records", "records changed", "evidence flips", "failed", "versions",
        title="by tool", title_justify="left",
    )  # fmt: skip
    for tool, row in totals.get("tools", {}).items():
        table.add_row(
            Text(printable(tool)),
            str(row["records"]),
            str(row["records_changed"]),
            Text(printable(_cell(row["evidence_flips"]))),
            Text(printable(_cell(row["failed"]))),
            Text(printable(row["versions"]["text"])),
        )
    return table


def print_summary(
    totals: dict[str, Any], as_json: bool, to_stderr: bool, flips: Flips | None = None
) -> None:
    if as_json:
        typer.echo(dumps(totals), err=to_stderr)
        return
    console = Console(stderr=to_stderr, highlight=False)
    table = Table(show_header=False, title="re-projected", title_justify="left")
    for name, value in totals.items():
        if name not in ("tools", "versions"):
            table.add_row(name, Text(printable(_cell(value))))
    console.print(table)
    if totals.get("tools"):
        console.print(tools_table(totals))
    if flips is not None and totals.get("evidence_flips"):
        seen = int(totals["evidence_flips"])
        more = (
            f" (the first {len(flips.shown)}; --limit N for more)"
            if seen > len(flips.shown)
            else ""
        )
        console.print(f"evidence flips: {seen}{more}")
        for text in flips.shown:
            console.print(Text(printable(text)))


def version_mismatch(totals: dict[str, Any], registry: ToolRegistry) -> str | None:
    """One line when the workers ran another version of a tool than this process's registry
    declares (the reprojections worker's registry is the one that counts)."""
    odd = []
    for tool, row in totals.get("tools", {}).items():
        spec = registry.get(tool)
        if spec is None:
            continue
        ran = [v for v in row["versions"]["ran"] if v != spec.projector_version]
        if ran:
            odd.append(f"{tool} v{', v'.join(ran)} (here v{spec.projector_version})")
    if not odd:
        return None
    return (
        "the reprojections workers ran " + "; ".join(odd) + ": restart them with the new "
        "registry (TOOL_BOUNDARY_TOOLS) to compare against it"
    )


@dataclass(frozen=True)
class Following:
    """How ``reproject_current`` follows and reports a job."""

    out: str
    as_json: bool
    stall_s: float
    human: bool
    limit: int
    total: int | None
    full: bool = False


def run_job(
    store: RedisCanonicalStore,
    *,
    settings: Settings,
    registry: ToolRegistry,
    job_id: str,
    how: Following,
    stream: IO[str] | None,
) -> None:
    """Follows the job to its end, prints the summary and exits by how it ended: 0, 5 (it
    ended with projection failures), ``EXIT_CANCELLED`` (cancelled elsewhere), 3 (failed,
    or stalled: no worker took its chunks)."""
    jobs = job_store(store, settings)
    flips = Flips(how.limit)
    note = (
        f"job {job_id} goes on in the workers: follow it again with --job {job_id}, "
        f"stop it with tool-boundary jobs cancel {job_id}"
    )
    with interrupt_note(note):
        try:
            ended, lines, stalled = follow(
                jobs, job_id, stream, how.stall_s,
                total=how.total, on_line=flips.add, as_shown=readable(how.full),
            )  # fmt: skip
        finally:
            if stream is not None and stream is not sys.stdout:
                stream.close()
            elif stream is not None:
                stream.flush()
    if ended is None:
        fail(f"job {job_id} expired while it was followed", EXIT_NOT_FOUND)
    if stalled:
        fail(
            f"job {job_id} made no progress in {how.stall_s:g}s (is a worker consuming the "
            f"reprojections queue?); it stays: follow it again with --job {job_id}",
            EXIT_UNAVAILABLE,
        )
    totals = job_summary(ended, lines)
    to_stderr = how.out == "-" and not how.human
    print_summary(totals, how.as_json, to_stderr, flips if how.human else None)
    mismatch = version_mismatch(totals, registry)
    if mismatch:
        typer.echo(f"note: {mismatch}", err=True)
    if ended.state == "cancelled":
        typer.echo(f"job {job_id} was cancelled", err=True)
        raise typer.Exit(EXIT_CANCELLED)
    if ended.state == "failed":
        raise typer.Exit(EXIT_UNAVAILABLE)
    if totals["failed"]:
        by_type = [
            f"{tool}: {', '.join(f'{k} {v}' for k, v in row['failed'].items())}"
            for tool, row in totals["tools"].items()
            if row["failed"]
        ]
        shown = "; ".join(by_type) or _cell(totals["failed_by_code"])
        typer.echo(f"error: {totals['failed']} projection(s) failed ({shown})", err=True)
        raise typer.Exit(EXIT_PROJECTIONS_FAILED)
