"""What the web pages show, read from the store: plain dicts, no HTML.

Reads only, with the store's bounded reads: the runs index (never a SCAN, read a page at a
time), pipelines of run summaries, one read of a run's calls (its progress and pending
sets), one record. No raw response is read unless the server shows raw responses.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from boundary import CallProgress, CanonicalKey, CanonicalRecord, InvocationStatus
from boundary.flow import Flow
from boundary.models import is_safe_id
from boundary.store.base import CanonicalStore, RunSummary
from tasks.views import compact, in_lists, limits_view, observe_run, progress_of

#: Runs a page of the runs index lists.
RUNS_PAGE = 50
#: Newest runs whose calls are read to filter by tool (each is one read of the run's calls).
TOOL_FILTER_RUNS = 500
#: Runs of the index whose counts are read per step (the index is never held whole).
SUMMARY_PAGE = 1000
#: Characters of a JSON field shown on a call's page (the rest is cut, and the page says so).
FIELD_CHARS = 20_000
#: Characters of a raw response shown with ``--show-raw``.
RAW_CHARS = 65_536

#: The statuses the runs index filters by: runs with at least one such call.
STATUS_FILTERS = ("PROJECTING", "READY", "ERROR")


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round(max((end - start).total_seconds(), 0.0), 1)


def limits_page(flow: Flow | None) -> dict[str, Any]:
    """Each limited tool of the fleet: its limits, calls holding a slot, waiting by tenant,
    and starts in its rate period (``tool-boundary limits``; the store's index of limited
    tools and each tool's own keys, never a scan). Raises ``StoreError``."""
    if flow is None:
        return {"tools": [], "available": False}
    return {"tools": [limits_view(s) for s in flow.fleet_status()], "available": True}


def call_state(record: CanonicalRecord, progress: CallProgress | None) -> tuple[str, int | None]:
    """``running``, ``waiting`` (for a slot of its tool: flow control), ``queued`` (sent, not
    started) or ``done``; and, while waiting, the calls ahead of it (``None``: not known)."""
    if record.status is not InvocationStatus.PROJECTING:
        return "done", None
    if progress is not None and progress.waiting:
        return "waiting", progress.ahead
    return ("running" if record.started_at is not None else "queued"), None


def call_row(store: CanonicalStore, record: CanonicalRecord, now: datetime) -> dict[str, Any]:
    """One call as a run's page (and its live updates) show it: never request or raw."""
    progress = progress_of(store, record) if record.status is InvocationStatus.PROJECTING else None
    state, ahead = call_state(record, progress)
    end = record.updated_at if state == "done" else now
    return {
        "seq": record.seq,
        "tool_call_id": record.tool_call_id,
        "tool_name": record.tool_name,
        "status": record.status.value,
        "state": state,
        "ahead": ahead,
        "evidence_status": record.evidence_status.value if record.evidence_status else None,
        "error_code": record.error_code.value if record.error_code else None,
        "attempt": record.attempt,
        "fraction": record.progress if state == "running" else None,
        "message": record.progress_message if state == "running" else None,
        "queued_s": _seconds(
            record.created_at, record.started_at or (now if state != "done" else None)
        ),
        "ran_s": _seconds(record.started_at, end),
        "total_s": _seconds(record.created_at, end),
        "heartbeat_age_s": _seconds(record.heartbeat_at, now) if state == "running" else None,
    }


def run_calls(store: CanonicalStore, run_id: str) -> list[CanonicalRecord]:
    """The run's calls in acceptance order (one read; raw responses are not read)."""
    records = [e.record for e in store.progress(run_id) if e.record is not None]
    return sorted(records, key=lambda r: r.seq)


def run_page(store: CanonicalStore, run_id: str) -> dict[str, Any] | None:
    """A run's page: its counts, its calls and its observed facts; ``None``: no such run."""
    if not is_safe_id(run_id):
        return None
    summary = store.run_summary(run_id)
    if summary is None:
        return None
    now = datetime.now(UTC)
    rows = [call_row(store, r, now) for r in run_calls(store, run_id)]
    facts = observe_run(store, run_id)
    return {
        "run_id": run_id,
        "summary": summary,
        "calls": rows,
        "counts": _state_counts(rows),
        "facts": [
            {
                "tool_call_id": f.tool_call_id,
                "tool_name": f.tool_name,
                "evidence_status": f.evidence_status.value,
                "result": compact(f.result, 400),
                "scope": compact(f.scope, 200),
            }
            for f in facts.facts
        ],
        "excluded": dict(sorted(facts.excluded.items())),
        "omitted": facts.omitted,
    }


def live_rows(store: CanonicalStore, run_id: str) -> list[dict[str, Any]]:
    """What a run's live updates carry: every call's row (small; no request, no result)."""
    now = datetime.now(UTC)
    return [call_row(store, r, now) for r in run_calls(store, run_id)]


def _state_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts = {"running": 0, "waiting": 0, "queued": 0}
    for row in rows:
        if row["state"] in counts:
            counts[row["state"]] += 1
    return counts


@dataclass(frozen=True)
class RunsQuery:
    status: str | None = None
    tool: str | None = None


def _status_matches(summary: RunSummary, status: str | None) -> bool:
    if status == "PROJECTING":
        return summary.projecting > 0
    if status == "READY":
        return summary.ready > 0
    if status == "ERROR":
        return summary.error > 0
    return True


def runs_page(store: CanonicalStore, query: RunsQuery) -> dict[str, Any]:
    """The runs index, newest first (by its newest call), with counts by status and the
    running and waiting calls of each run shown; filtered by status and tool.

    The index is read a page at a time, oldest first (``run_ids``), and never held whole:
    every run's counts go into the totals, and only the newest runs the page can show are
    kept (``RUNS_PAGE``, or the ``TOOL_FILTER_RUNS`` whose calls are read to filter by
    tool); only those runs' calls are read."""
    keep = TOOL_FILTER_RUNS if query.tool else RUNS_PAGE
    newest: deque[RunSummary] = deque(maxlen=keep)
    totals = {"runs": 0, "calls": 0, "ready": 0, "error": 0, "projecting": 0}
    matching = 0
    for page in in_lists(store.run_ids(), SUMMARY_PAGE):
        for summary in store.run_summaries(page):
            totals["runs"] += 1
            totals["calls"] += summary.calls
            totals["ready"] += summary.ready
            totals["error"] += summary.error
            totals["projecting"] += summary.projecting
            if _status_matches(summary, query.status):
                matching += 1
                newest.append(summary)
    runs = list(reversed(newest))
    calls: dict[str, list[CanonicalRecord]] = {}
    if query.tool:
        candidates = [s.run_id for s in runs]
        progress = store.progress_many(candidates) if candidates else {}
        calls = {r: [e.record for e in entries if e.record] for r, entries in progress.items()}
        runs = [s for s in runs if any(c.tool_name == query.tool for c in calls.get(s.run_id, []))]
        matching = len(runs)
    shown = runs[:RUNS_PAGE]
    busy = [s.run_id for s in shown if s.projecting and s.run_id not in calls]
    if busy:
        for run_id, entries in store.progress_many(busy).items():
            calls[run_id] = [e.record for e in entries if e.record]
    now = datetime.now(UTC)
    rows = []
    for s in shown:
        live = [
            call_row(store, r, now)
            for r in sorted(calls.get(s.run_id, []), key=lambda r: r.seq)
            if r.status is InvocationStatus.PROJECTING
        ]
        rows.append({"summary": s, "live": live, "counts": _state_counts(live)})
    return {
        "runs": rows,
        "matching": matching,
        "totals": totals,
        "query": query,
        "tool_searched": TOOL_FILTER_RUNS if query.tool else None,
    }


def call_page(
    store: CanonicalStore, run_id: str, tool_call_id: str, *, show_raw: bool
) -> dict[str, Any] | None:
    """A call's record: request, bounded result, scope, times, attempts; its raw response
    only when ``show_raw``. ``None``: no such call."""
    if not (is_safe_id(run_id) and is_safe_id(tool_call_id)):
        return None
    record = store.get(CanonicalKey(run_id=run_id, tool_call_id=tool_call_id), with_raw=show_raw)
    if record is None:
        return None
    row = call_row(store, record, datetime.now(UTC))
    page: dict[str, Any] = {
        "record": record,
        "row": row,
        "updated": last_change(record),
        "stopped": stopped_at(record),
        "request": pretty(record.request),
        "agent_result": pretty(record.agent_result),
        "scope": pretty(record.scope),
        "diagnostic": record.diagnostic.model_dump(mode="json") if record.diagnostic else None,
        "raw": None,
        "raw_bytes": None,
    }
    if show_raw and record.raw is not None:
        page["raw"] = pretty(record.raw, RAW_CHARS)
        page["raw_bytes"] = len(record.raw.encode("utf-8"))
    return page


def last_change(record: CanonicalRecord) -> datetime:
    """When the record last changed: its last write, or its tool's last heartbeat or start
    (a heartbeat does not move ``updated_at``)."""
    times = [t for t in (record.updated_at, record.started_at, record.heartbeat_at) if t]
    return max(times)


def stopped_at(record: CanonicalRecord) -> str | None:
    """Where an ended call's tool was when it ended, as its last progress said (``show``
    prints the same fields); ``None`` for a call in flight or one that ended READY."""
    if record.status is not InvocationStatus.ERROR:
        return None
    if record.started_at is None:
        return "before its tool started"
    parts = []
    if record.progress is not None:
        parts.append(f"{round(record.progress * 100)} %")
    if record.progress_message:
        parts.append(record.progress_message)
    where = ", ".join(parts) if parts else "no progress reported"
    if record.heartbeat_at is not None:
        where += f" (last heartbeat {record.heartbeat_at.isoformat()})"
    return f"attempt {record.attempt}: {where}"


def pretty(text: str | None, limit: int = FIELD_CHARS) -> str | None:
    """A stored JSON text indented for reading, cut past ``limit`` characters (said so)."""
    if text is None:
        return None
    try:
        shown = json.dumps(json.loads(text), ensure_ascii=False, indent=2, sort_keys=True)
    except ValueError:
        shown = text
    if len(shown) > limit:
        shown = f"{shown[:limit]}\n... ({len(shown) - limit} more characters not shown)"
    return shown
