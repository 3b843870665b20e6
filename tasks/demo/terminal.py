"""How ``tool-boundary demo`` shows a run: a rich table that grows call by call, then the
run's observed facts; or one JSON document with ``--json``."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from boundary import EvidenceStatus, InvocationStatus, ObservedFacts
from tasks.demo.long_calls import LONG_SCRIPT, LongReport, LongView
from tasks.demo.script import SCRIPT, CallReport, DemoReport
from tasks.views import printable

#: Characters of a fact's result shown in the facts table (``--json`` shows all).
FACT_CHARS = 160

_STATUS_STYLE = {"READY": "green", "ERROR": "red", "PROJECTING": "bold red"}


#: Narrower terminals get the compact calls table (tool and tool_call_id in one column).
WIDE_COLUMNS = 100
#: The longest word of a step's label ("tool_call_id", "unauthorized"): never split.
LABEL_MIN_WIDTH = 12


def calls_table(width: int = WIDE_COLUMNS) -> Table:
    """The calls table; below ``WIDE_COLUMNS`` the tool and its call id share a column, so
    every column fits 80 columns without cutting a word."""
    table = Table(title="Tool calls, as they happen", title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("the agent makes", min_width=LABEL_MIN_WIDTH)
    if width >= WIDE_COLUMNS:
        table.add_column("tool", no_wrap=True)
        table.add_column("tool_call_id", no_wrap=True)
    else:
        table.add_column("tool\ntool_call_id", no_wrap=True)
    # READY + evidence status, or ERROR + error code (an error's evidence is always ERROR).
    table.add_column("status  evidence / error code", no_wrap=True)
    table.add_column("ms", justify="right", no_wrap=True)
    return table


def add_call(table: Table, number: int, call: CallReport) -> None:
    outcome = Text(call.status, style=_STATUS_STYLE.get(call.status, ""))
    detail = call.error_code if call.status == "ERROR" else call.evidence_status
    if detail:
        outcome.append(f"  {detail}")
    if not call.expected:
        outcome.append(" (unexpected)", style="bold red")
    ids = (
        [call.tool, call.tool_call_id]
        if len(table.columns) == 6
        else [f"{call.tool}\n{call.tool_call_id}"]
    )
    table.add_row(str(number), call.step, *ids, outcome, f"{call.latency_ms:.0f}")


def facts_table(facts: ObservedFacts) -> Table:
    excluded = ", ".join(f"{k}: {v}" for k, v in sorted(facts.excluded.items())) or "none"
    table = Table(
        title=f"Observed facts of run {facts.run_id}",
        title_justify="left",
        caption=f"excluded: {excluded}; omitted by the bounds: {facts.omitted}",
        caption_justify="left",
    )
    for name in ("tool_call_id", "tool", "evidence", "result (bounded)"):
        table.add_column(name, overflow="fold")
    for fact in facts.facts:
        evidence = fact.evidence_status.value
        if fact.evidence_status is EvidenceStatus.NO_EVIDENCE:
            evidence += "\n(negative)"
        shown = fact.result if fact.result is not None else {"scope": fact.scope}
        text = json.dumps(shown, ensure_ascii=False, sort_keys=True)
        if len(text) > FACT_CHARS:
            text = text[:FACT_CHARS] + "..."
        table.add_row(fact.tool_call_id, fact.tool_name, evidence, Text(text))
    return table


def long_bars(calls: list[LongView]) -> Progress:
    """The long calls as progress bars: fraction, attempt and the tool's message (or that the
    call waits for a slot of its limited tool)."""
    bars = Progress(
        TextColumn("{task.fields[name]}"),
        BarColumn(bar_width=24),
        TaskProgressColumn(),
        TextColumn("{task.fields[note]}"),
    )
    for step, record, waiting in calls:
        fraction = (record.progress or 0.0) if record is not None else 0.0
        if record is None or record.status is InvocationStatus.PROJECTING:
            started = record is not None and record.started_at is not None
            note = f"attempt {record.attempt}" if record is not None and started else "queued"
            note = waiting or note
            if record is not None and record.progress_message:
                note += f": {record.progress_message}"
        else:
            code = record.error_code.value if record.error_code else record.evidence_status
            note = f"{record.status.value} {code or ''} (attempt {record.attempt})"
            fraction = 1.0 if record.status is InvocationStatus.READY else fraction
        bars.add_task(
            "",
            total=1000,
            completed=round(fraction * 1000),
            name=printable(f"{step.tool_call_id} {step.label}"),
            note=printable(note),
        )
    return bars


def long_table(calls: list[LongReport]) -> Table:
    table = Table(title="Long calls", title_justify="left")
    for name in ("tool_call_id", "the agent's long call", "status", "attempt", "s"):
        table.add_column(name, overflow="fold")
    for call in calls:
        outcome = Text(call.status, style=_STATUS_STYLE.get(call.status, ""))
        if call.error_code:
            outcome.append(f"  {call.error_code}")
        if call.stopped_at:
            outcome.append(f"\n(stopped at {call.stopped_at})")
        if call.waited:
            outcome.append("\n(waited for a slot)")
        if not call.expected:
            outcome.append(" (unexpected)", style="bold red")
        table.add_row(
            call.tool_call_id, call.step, outcome, str(call.attempt), f"{call.seconds:.1f}"
        )
    return table


class LiveView:
    """Prints the header line, then the calls table as it grows, then the long calls' bars."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.table = calls_table(console.width)
        self.live: Live | None = None
        self.count = 0

    def ready(self, report: DemoReport) -> None:
        if report.mode == "embedded":
            self.console.print(
                "No TOOL_BOUNDARY_REDIS_URL: using an embedded Redis-protocol server "
                f"(fakeredis) at {report.store} and an in-process Celery worker."
            )
        else:
            self.console.print(f"Using Redis at {report.store}.")
        self.console.print(
            f"Run {report.run_id}: {len(SCRIPT)} scripted tool calls, then "
            f"{len(LONG_SCRIPT)} long ones side by side."
        )
        if report.web_url:
            self.console.print(f"Web view: {report.web_url}")
        self.live = Live(self.table, console=self.console, auto_refresh=False)
        self.live.start()

    def call(self, call: CallReport) -> None:
        self.count += 1
        add_call(self.table, self.count, call)
        if self.live is not None:
            self.live.refresh()

    def long(self, calls: list[LongView]) -> None:
        if self.live is not None:
            self.live.update(Group(self.table, long_bars(calls)), refresh=True)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def report_json(report: DemoReport) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "mode": report.mode,
        "store": report.store,
        "ok": report.ok,
        "wall_s": round(report.wall_s, 3),
        "calls": [
            {
                "step": c.step,
                "tool": c.tool,
                "tool_call_id": c.tool_call_id,
                "status": c.status,
                "evidence_status": c.evidence_status,
                "error_code": c.error_code,
                "latency_ms": round(c.latency_ms, 1),
                "result": c.result,
                "scope": c.scope,
                "expected": c.expected,
            }
            for c in report.calls
        ],
        "long_calls": [
            {
                "step": c.step,
                "tool_call_id": c.tool_call_id,
                "status": c.status,
                "error_code": c.error_code,
                "attempt": c.attempt,
                "stopped_at": c.stopped_at,
                "seconds": c.seconds,
                "expected": c.expected,
                "waited_for_slot": c.waited,
            }
            for c in report.long_calls
        ],
        "facts": report.facts.model_dump(mode="json") if report.facts else None,
        "web_url": report.web_url,
    }
