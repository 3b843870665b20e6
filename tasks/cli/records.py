"""``show``, ``runs`` and ``observe``: the record and run views (they only read the store)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from boundary import (
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    ObservedFacts,
)
from boundary.diagnostics import Diagnostic
from boundary.reprojection import versions_present
from boundary.store.base import CanonicalStore
from tasks.cli.common import (
    JsonFlag,
    RunArg,
    dumps,
    fail,
    open_store,
    parsed,
    pretty,
    printable,
    reaching,
    require_id,
    settings_or_fail,
)
from tasks.exits import EXIT_NOT_FOUND
from tasks.views import call_view, compact, in_lists, observe_run, progress_of

#: Display of a record's JSON fields: cut past this many characters (``--json`` never cuts).
SHOW_CELL_CHARS = 2000
#: The same for a fact's result or scope in ``observe``.
FACT_CELL_CHARS = 200


# --- show ---------------------------------------------------------------------------------


def _record_json(record: CanonicalRecord, raw: bool) -> dict[str, Any]:
    fields = record.model_dump(mode="json", exclude={"raw"})
    for name in ("request", "agent_result", "scope"):
        fields[name] = parsed(fields[name])
    fields["raw_bytes"] = None if record.raw is None else len(record.raw.encode("utf-8"))
    if raw:
        fields["raw"] = parsed(record.raw)
    return fields


#: The fields ``show`` prints, in this order (the raw response comes last, if asked for).
_SHOWN_FIELDS = (
    "run_id",
    "tool_call_id",
    "tool_name",
    "status",
    "evidence_status",
    "error_code",
    "projector_version",
    "seq",
    "created_at",
    "updated_at",
    "deadline",
    "attempt",
    "handbacks",
    "started_at",
    "heartbeat_at",
    "progress",
    "progress_message",
    "waiting",
    "request",
    "request_sha256",
    "agent_result",
    "scope",
    "diagnostic",
    "raw_bytes",
)


def _diagnostic_text(diagnostic: Diagnostic | None) -> str:
    if diagnostic is None:
        return "-"
    return f"{diagnostic.stage.value} step: {diagnostic.summary()}"


def show(
    run_id: RunArg,
    call_id: Annotated[str, typer.Argument(help="The framework's tool call id.")],
    raw: Annotated[bool, typer.Option("--raw", help="Also print the raw tool response.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The canonical record of one call (the Harness view); the raw response only with --raw."""
    key = CanonicalKey(
        run_id=require_id(run_id, "run id"), tool_call_id=require_id(call_id, "call id")
    )
    settings = settings_or_fail()
    with reaching(settings):
        store = open_store(settings)
        record = store.get(key)
        waiting = None
        if record is not None and record.status is InvocationStatus.PROJECTING:
            progress = progress_of(store, record)
            waiting = progress.message if progress is not None and progress.waiting else None
    if record is None:
        if as_json:
            # A script reading stdout gets JSON either way (the exit code still says 1).
            missing = {"error": "RECORD_NOT_FOUND", "run_id": run_id, "tool_call_id": call_id}
            typer.echo(dumps(missing))
        fail(f"no record for call {call_id} of run {run_id} (RECORD_NOT_FOUND)", EXIT_NOT_FOUND)
    fields = _record_json(record, raw)
    # A limited tool's call waiting for a slot: "waiting for a slot (3 ahead)".
    fields["waiting"] = waiting
    if as_json:
        typer.echo(dumps(fields))
        return
    console = Console(highlight=False)
    table = _fields_table()
    for name in _SHOWN_FIELDS:
        value = fields[name]
        # A hash is copied whole: never folded mid-hash. Where the table's columns leave it
        # too little room (80 columns), it gets a line of its own.
        if name == "request_sha256" and value and _LABEL_WIDTH + len(value) > console.width:
            console.print(table)
            console.print(Text.assemble((name, "bold"), "  ", value), no_wrap=True)
            table = _fields_table()
            continue
        if name in ("request", "agent_result", "scope"):
            table.add_row(name, pretty(value, SHOW_CELL_CHARS))
        elif name == "diagnostic":
            table.add_row(name, Text(printable(_diagnostic_text(record.diagnostic))))
        else:
            table.add_row(name, Text(printable("-" if value is None else str(value))))
    if record.raw is None:
        table.add_row("raw", Text("none"))
    elif raw:
        table.add_row("raw", pretty(fields["raw"], SHOW_CELL_CHARS))
    else:
        table.add_row("raw", Text(f"{fields['raw_bytes']} bytes, hidden (--raw shows it)"))
    console.print(table)


#: The field names' column of ``show``: the longest name and its padding.
_LABEL_WIDTH = max(len(name) for name in _SHOWN_FIELDS) + 2


def _fields_table() -> Table:
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold", min_width=_LABEL_WIDTH - 2)
    table.add_column(overflow="fold")
    return table


# --- runs ---------------------------------------------------------------------------------


#: Running calls ``runs`` names per run (the rest are counted).
RUNNING_SHOWN = 3


def _running_text(views: list[dict[str, Any]]) -> str:
    parts = []
    for view in views[:RUNNING_SHOWN]:
        done = "started" if view["started"] else "queued"
        if view["waiting"]:
            done = "waiting" if view["ahead"] is None else f"waiting ({view['ahead']} ahead)"
        if view["fraction"] is not None:
            done = f"{view['fraction']:.0%}"
        parts.append(f"{view['tool_call_id']} {done}")
    if len(views) > RUNNING_SHOWN:
        parts.append(f"+{len(views) - RUNNING_SHOWN}")
    return ", ".join(parts) or "-"


#: Runs read and printed per step (``runs``): the runs index is never held whole.
RUNS_PER_STEP = 1000


def _run_rows(store: CanonicalStore, run_ids: list[str]) -> list[dict[str, Any]]:
    """``runs``' rows of these runs (unknown ones left out): their counts (one pipeline)
    and the progress of their calls in flight (one read of each busy run's calls)."""
    summaries = store.run_summaries(run_ids)
    busy = [s.run_id for s in summaries if s.projecting]
    entries = store.progress_many(busy) if busy else {}
    now = datetime.now(UTC)
    running = {
        run_id: [
            call_view(e.record, now, progress_of(store, e.record))
            for e in run_entries
            if e.record is not None and e.record.status is InvocationStatus.PROJECTING
        ]
        for run_id, run_entries in entries.items()
    }
    return [
        {
            "run_id": s.run_id,
            "calls": s.calls,
            "ready": s.ready,
            "error": s.error,
            "projecting": s.projecting,
            "running": running.get(s.run_id, []),
        }
        for s in summaries
    ]


def runs(as_json: JsonFlag = False) -> None:
    """Every live run with its calls counted by status, and the progress of its calls in
    flight (``watch RUN_ID`` follows them live), in the runs index's order (the run with the
    oldest newest call first). Read and printed a thousand runs at a time: the list of runs
    is never held whole."""
    settings = settings_or_fail()
    console = Console(highlight=False)
    printed = 0
    with reaching(settings):
        store = open_store(settings)
        for run_ids in in_lists(store.run_ids(), RUNS_PER_STEP):
            rows = _run_rows(store, run_ids)
            if not rows:
                continue
            if as_json:
                # The same text as one dumps() of the whole list: "[row,row,...]".
                typer.echo(("," if printed else "[") + ",".join(dumps(r) for r in rows), nl=False)
            else:
                table = Table("run", "calls", "ready", "error", "projecting", "running")
                for row in rows:
                    counts = (
                        str(row[c]) for c in ("run_id", "calls", "ready", "error", "projecting")
                    )
                    table.add_row(*counts, Text(printable(_running_text(row["running"]))))
                console.print(table)
            printed += len(rows)
    if as_json:
        typer.echo("]" if printed else "[]")
    elif not printed:
        typer.echo("no runs")


# --- observe ------------------------------------------------------------------------------


def _compact(value: Any, limit: int) -> str:
    return printable(compact(value, limit, cut=" characters; --json shows all"))


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
    by_version = Counter(f.projector_version or "?" for f in facts.facts)
    if by_version:
        counts = ", ".join(f"v{v} {n}" for v, n in sorted(by_version.items()))
        console.print(Text(f"facts by projector version: {counts}"))
    for number, fact in enumerate(facts.facts, start=1):
        evidence = fact.evidence_status.value
        if fact.evidence_status is EvidenceStatus.NO_EVIDENCE:
            evidence += " (negative)"
        console.print(
            Text(
                f"{number:>3}. {fact.tool_call_id}  {printable(fact.tool_name)}  {evidence}"
                f"  projector v{fact.projector_version or '?'}"
            )
        )
        if fact.result is not None:
            console.print(Text(f"     result: {_compact(fact.result, FACT_CELL_CHARS)}"))
        if fact.scope is not None:
            console.print(Text(f"     scope:  {_compact(fact.scope, FACT_CELL_CHARS)}"))


def observe(
    run_id: RunArg,
    projector_version: Annotated[
        str | None,
        typer.Option(
            "--projector-version",
            help="Facts from the side projections of this projector version where kept "
            "(reproject --projectors current --write).",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The run's observed facts: its READY calls in acceptance order, within the bounds."""
    require_id(run_id, "run id")
    if projector_version is not None:
        require_id(projector_version, "projector version")
    settings = settings_or_fail()
    with reaching(settings):
        store = open_store(settings)
        facts = observe_run(store, run_id, projector_version)
        empty = not (facts.facts or facts.excluded or facts.omitted)
        if empty and store.run_summary(run_id) is None:
            fail(f"no run {run_id} (RECORD_NOT_FOUND)", EXIT_NOT_FOUND)
        if projector_version is not None:
            present = versions_present(store, run_id)
            if projector_version not in present:
                # The sealed facts would read as that version's: say so instead.
                listed = ", ".join(present) or "none"
                fail(
                    f"no call of run {run_id} has a projection of version "
                    f"{projector_version!r} (versions present: {listed})",
                    EXIT_NOT_FOUND,
                )
    if as_json:
        typer.echo(dumps(facts.model_dump(mode="json")))
    else:
        _print_facts(facts)
