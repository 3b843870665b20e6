"""``tool-boundary``: look at records and runs, and reprocess run projections, without
writing Redis commands.

For operators (the Harness side): ``show --raw`` prints a raw tool response. Every command
reads the ``TOOL_BOUNDARY_*`` settings, has ``--json`` for scripts, and exits with one of the
``EXIT_*`` codes below; a failure prints one line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import IO, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from boundary import (
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    ObservedFacts,
    RedisCanonicalStore,
    StoreError,
    StoreUnavailable,
)
from boundary.diagnostics import Diagnostic
from boundary.models import is_safe_id
from tasks.exits import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)
from tasks.mcp_server.command import mcp_command
from tasks.runs import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_CHUNK_TIMEOUT_S,
    BatchSummary,
    ReprojectError,
    observe_run,
    reproject,
)
from tasks.services import ServiceUnavailable
from tasks.settings import InvalidSettings, Settings, load_settings, redis_location

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "cli",
    "main",
]

#: Display of a record's JSON fields: cut past this many characters (``--json`` never cuts).
SHOW_CELL_CHARS = 2000
#: The same for a fact's result or scope in ``observe``.
FACT_CELL_CHARS = 200

cli = typer.Typer(
    name="tool-boundary",
    help="Look at canonical tool-call records and runs; reprocess run projections; run the demo.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Markdown reflows a docstring's paragraphs to the terminal's width (its source line
    # breaks are not sentence breaks).
    rich_markup_mode="markdown",
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
RunArg = Annotated[str, typer.Argument(help="The run id.", show_default=False)]


# --- plumbing -----------------------------------------------------------------------------


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _settings() -> Settings:
    try:
        return load_settings()
    except InvalidSettings as exc:
        _fail(exc.problem, EXIT_USAGE)


def _store(settings: Settings) -> RedisCanonicalStore:
    try:
        return RedisCanonicalStore.from_url(
            settings.store_url,
            ttl_s=settings.ttl_s,
            limits=settings.limits,
            cluster=settings.redis_cluster,
        )
    except ValueError:
        _fail("TOOL_BOUNDARY_REDIS_URL is not a Redis URL", EXIT_USAGE)


@contextmanager
def _reaching(settings: Settings) -> Iterator[None]:
    """Turns an unreachable store, broker or backend into one line and ``EXIT_UNAVAILABLE``."""
    try:
        yield
    except StoreUnavailable as exc:
        where = redis_location(settings.store_url)
        _fail(f"the store at {where} is unreachable ({exc.code.value})", EXIT_UNAVAILABLE)
    except StoreError as exc:
        where = redis_location(settings.store_url)
        _fail(f"the store at {where} failed ({exc.code.value})", EXIT_UNAVAILABLE)
    except ServiceUnavailable as exc:
        if exc.hint:
            _fail(exc.hint, EXIT_UNAVAILABLE)
        _fail(_unreachable(settings, exc.part, exc.code.value), EXIT_UNAVAILABLE)
    except ReprojectError as exc:
        _fail(_unreachable(settings, exc.part, exc.code.value), EXIT_UNAVAILABLE)


def _unreachable(settings: Settings, part: str, code: str) -> str:
    url = settings.broker if part == "broker" else settings.backend
    return f"the {part} at {redis_location(url)} is unreachable ({code})"


def _require_id(value: str, what: str) -> str:
    if not is_safe_id(value):
        _fail(f"{what} {value!r} is not a safe identifier", EXIT_USAGE)
    return value


def _dumps(value: Any) -> str:
    """JSON for scripts: ASCII only, so it is safe on any terminal and parses back as is."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), sort_keys=True)


def _printable(text: str) -> str:
    """Escapes control and format characters (terminal escapes, bidi overrides) that tool
    output could carry into an operator's terminal; keeps newlines and tabs."""
    return "".join(
        c if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf") else f"\\u{ord(c):04x}"
        for c in text
    )


def _parsed(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pretty(value: Any, limit: int) -> Text:
    text = json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters; --json shows all)"
    return Text(_printable(text))


# --- show ---------------------------------------------------------------------------------


def _record_json(record: CanonicalRecord, raw: bool) -> dict[str, Any]:
    fields = record.model_dump(mode="json", exclude={"raw"})
    for name in ("request", "agent_result", "scope"):
        fields[name] = _parsed(fields[name])
    fields["raw_bytes"] = None if record.raw is None else len(record.raw.encode("utf-8"))
    if raw:
        fields["raw"] = _parsed(record.raw)
    return fields


#: The fields ``show`` prints, in this order (the raw response comes last, if asked for).
_SHOWN_FIELDS = (
    "run_id",
    "tool_call_id",
    "tool_name",
    "status",
    "evidence_status",
    "error_code",
    "seq",
    "created_at",
    "updated_at",
    "deadline",
    "request",
    "agent_result",
    "scope",
    "diagnostic",
    "raw_bytes",
)


def _diagnostic_text(diagnostic: Diagnostic | None) -> str:
    if diagnostic is None:
        return "-"
    return f"{diagnostic.stage.value} step: {diagnostic.summary()}"


@cli.command()
def show(
    run_id: RunArg,
    call_id: Annotated[str, typer.Argument(help="The framework's tool call id.")],
    raw: Annotated[bool, typer.Option("--raw", help="Also print the raw tool response.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The canonical record of one call (the Harness view); the raw response only with --raw."""
    key = CanonicalKey(
        run_id=_require_id(run_id, "run id"), tool_call_id=_require_id(call_id, "call id")
    )
    settings = _settings()
    with _reaching(settings):
        record = _store(settings).get(key)
    if record is None:
        _fail(f"no record for call {call_id} of run {run_id} (RECORD_NOT_FOUND)", EXIT_NOT_FOUND)
    fields = _record_json(record, raw)
    if as_json:
        typer.echo(_dumps(fields))
        return
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name in _SHOWN_FIELDS:
        value = fields[name]
        if name in ("request", "agent_result", "scope"):
            table.add_row(name, _pretty(value, SHOW_CELL_CHARS))
        elif name == "diagnostic":
            table.add_row(name, Text(_printable(_diagnostic_text(record.diagnostic))))
        else:
            table.add_row(name, Text(_printable("-" if value is None else str(value))))
    if record.raw is None:
        table.add_row("raw", Text("none"))
    elif raw:
        table.add_row("raw", _pretty(fields["raw"], SHOW_CELL_CHARS))
    else:
        table.add_row("raw", Text(f"{fields['raw_bytes']} bytes, hidden (--raw shows it)"))
    Console(highlight=False).print(table)


# --- runs ---------------------------------------------------------------------------------


@cli.command()
def runs(as_json: JsonFlag = False) -> None:
    """Every live run (found by SCAN) with its calls counted by status."""
    settings = _settings()
    with _reaching(settings):
        store = _store(settings)
        summaries = store.run_summaries(sorted(store.run_ids()))
    rows = [
        {
            "run_id": s.run_id,
            "calls": s.calls,
            "ready": s.ready,
            "error": s.error,
            "projecting": s.projecting,
        }
        for s in summaries
    ]
    if as_json:
        typer.echo(_dumps(rows))
        return
    if not rows:
        typer.echo("no runs")
        return
    table = Table("run", "calls", "ready", "error", "projecting")
    for row in rows:
        table.add_row(*(str(row[c]) for c in ("run_id", "calls", "ready", "error", "projecting")))
    Console(highlight=False).print(table)


# --- observe ------------------------------------------------------------------------------


def _compact(value: Any, limit: int) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if len(text) > limit:
        text = f"{text[:limit]}... (+{len(text) - limit} characters; --json shows all)"
    return _printable(text)


def _print_facts(facts: ObservedFacts) -> None:
    console = Console(highlight=False, soft_wrap=True)
    negative = sum(1 for f in facts.facts if f.negative)
    excluded = ", ".join(f"{k} {v}" for k, v in sorted(facts.excluded.items())) or "none"
    console.print(
        Text(
            f"run {facts.run_id}: {len(facts.facts)} fact(s), {facts.evidence_count} with "
            f"evidence, {negative} negative; omitted by the bounds {facts.omitted}; "
            f"excluded: {excluded}"
        )
    )
    for number, fact in enumerate(facts.facts, start=1):
        evidence = fact.evidence_status.value
        if fact.evidence_status is EvidenceStatus.NO_EVIDENCE:
            evidence += " (negative)"
        console.print(
            Text(f"{number:>3}. {fact.tool_call_id}  {_printable(fact.tool_name)}  {evidence}")
        )
        if fact.result is not None:
            console.print(Text(f"     result: {_compact(fact.result, FACT_CELL_CHARS)}"))
        if fact.scope is not None:
            console.print(Text(f"     scope:  {_compact(fact.scope, FACT_CELL_CHARS)}"))


@cli.command()
def observe(run_id: RunArg, as_json: JsonFlag = False) -> None:
    """The run's observed facts: its READY calls in acceptance order, within the bounds."""
    _require_id(run_id, "run id")
    settings = _settings()
    with _reaching(settings):
        store = _store(settings)
        facts = observe_run(store, run_id)
        empty = not (facts.facts or facts.excluded or facts.omitted)
        if empty and store.run_summary(run_id) is None:
            _fail(f"no run {run_id} (RECORD_NOT_FOUND)", EXIT_NOT_FOUND)
    if as_json:
        typer.echo(_dumps(facts.model_dump(mode="json")))
    else:
        _print_facts(facts)


# --- reproject ----------------------------------------------------------------------------


def _runs_to_reproject(store: RedisCanonicalStore, runs: list[str], all_runs: bool) -> list[str]:
    if all_runs:
        return sorted(store.run_ids())
    unique = list(dict.fromkeys(runs))
    unknown = [r for r in unique if store.run_summary(r) is None]
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        _fail(f"no run {shown} (RECORD_NOT_FOUND); nothing was reprocessed", EXIT_NOT_FOUND)
    return unique


def _open_out(path: str) -> IO[str]:
    if path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")  # closed by the caller
    except OSError as exc:
        _fail(f"cannot write {path}: {exc.strerror}", EXIT_USAGE)


def _print_summary(summary: dict[str, Any], as_json: bool, to_stderr: bool) -> None:
    if as_json:
        typer.echo(_dumps(summary), err=to_stderr)
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


@cli.command(name="reproject")
def reproject_command(
    *,
    run: Annotated[
        list[str] | None, typer.Option("--run", help="A run to reprocess (repeatable).")
    ] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Every live run (SCAN).")] = False,
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
        _fail("give --run RUN (repeatable) or --all, not both", EXIT_USAGE)
    for run_id in runs:
        _require_id(run_id, "run id")
    settings = _settings()
    started = time.monotonic()
    with _reaching(settings):
        run_ids = _runs_to_reproject(_store(settings), runs, all_runs)
        stream = _open_out(out)
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
                bar = progress.add_task("runs", total=len(run_ids))
                for line in reproject(
                    run_ids,
                    chunk_size=chunk_size,
                    chunk_timeout_s=timeout,
                    on_done=lambda: progress.advance(bar),
                ):
                    stream.write(_dumps(line) + "\n")
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


# --- demo ---------------------------------------------------------------------------------


@cli.command()
def demo(
    no_worker: Annotated[
        bool,
        typer.Option(
            "--no-worker",
            help="Leave execution to external workers (celery -A tasks worker -Q "
            "tools,projections); needs TOOL_BOUNDARY_REDIS_URL.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run a scripted agent run through the whole boundary and show each call and the facts.

    With no TOOL_BOUNDARY_REDIS_URL it embeds a Redis-protocol server and a worker thread.
    Exits 0 when every call ends as scripted, 1 when one does not, 3 when the store is
    unreachable or a call does not finish (no worker).
    """
    # Imported here: the other commands need neither the worker nor the embedded server.
    from tasks.demo import CALL_TIMEOUT_S, run_demo
    from tasks.demo_view import LiveView, facts_table, report_json

    settings = _settings()
    if no_worker and settings.redis_url is None:
        _fail(
            "--no-worker needs TOOL_BOUNDARY_REDIS_URL (workers cannot reach an embedded server)",
            EXIT_USAGE,
        )
    console = Console(highlight=False)
    view = None if as_json else LiveView(console)
    try:
        with _reaching(settings):
            report = run_demo(
                settings,
                start_worker=not no_worker,
                on_ready=view.ready if view else None,
                on_call=view.call if view else None,
            )
    finally:
        if view is not None:
            view.stop()
    if as_json:
        typer.echo(_dumps(report_json(report)))
    else:
        if report.facts is not None:
            console.print()
            console.print(facts_table(report.facts))
        console.print(f"Done in {report.wall_s:.1f}s.")
    if any(call.status == "PROJECTING" for call in report.calls):
        _fail(
            f"a call did not finish within {CALL_TIMEOUT_S:.0f}s: is a worker running "
            "(celery -A tasks worker -Q tools,projections)?",
            EXIT_UNAVAILABLE,
        )
    if not report.ok:
        _fail("the run did not go as scripted (see the unexpected calls)", EXIT_NOT_FOUND)


class _Interrupted(BaseException):
    """Ctrl-C, raised by our SIGINT handler: click would turn a ``KeyboardInterrupt`` into
    ``Aborted!`` and exit 1; this passes through it to ``main``."""


#: Set by the first Ctrl-C: whatever escapes after it is a consequence of the interruption
#: (code cut short mid-way, e.g. a queue emptied under the embedded worker), not a bug.
_interrupted = False


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    if _interrupted:
        # A second Ctrl-C while the first one's clean-up runs: leave now.
        os._exit(EXIT_INTERRUPTED)
    # The process is ending: the embedded worker's complaints about calls cut short (its
    # store going away under them) would bury the one line that says what happened.
    logging.disable(logging.CRITICAL)
    _interrupted = True
    raise _Interrupted()


cli.command("mcp")(mcp_command)


def main() -> None:
    """The ``tool-boundary`` console script: every failure is one line on stderr.

    Ctrl-C exits ``EXIT_INTERRUPTED``; an unexpected exception (a bug) prints its type only,
    never its message (it may hold a URL or a payload), and exits ``EXIT_INTERNAL``.
    """
    signal.signal(signal.SIGINT, _interrupt)
    try:
        cli()
    except _Interrupted:
        typer.echo("\ninterrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        if _interrupted:  # the Ctrl-C's _Interrupted became another exception on its way out
            typer.echo("\ninterrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        typer.echo(f"error: unexpected {type(exc).__name__} (a bug; please report)", err=True)
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
