"""What operators are shown, shared by the CLI (``tasks.cli``), the web view (``tasks.web``)
and the demo (``tasks.demo``): a run's line (its observed facts, or why not), a call in
flight (its progress and its view), a limited tool's row, and text made safe for a terminal.

Plain functions over the store's bounded reads; no Celery, no output library.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Iterator
from datetime import datetime
from enum import StrEnum
from typing import Any

from boundary import (
    CallProgress,
    CanonicalRecord,
    CanonicalStore,
    ErrorCode,
    ObservedFacts,
    RunProgressProjector,
)
from boundary.flow import waiting_progress
from boundary.models import is_safe_id
from boundary.reprojection import observe_version
from boundary.store.flow import FlowStatus

# --- A run's line ---------------------------------------------------------------------------


class RunError(StrEnum):
    """Why a run's line holds an ``error`` instead of facts."""

    #: The store could not be read (in the task, after retries).
    STORE_UNAVAILABLE = ErrorCode.STORE_UNAVAILABLE.value
    #: The run id is not a safe identifier, so no run can have it.
    INVALID_RUN_ID = "INVALID_RUN_ID"
    #: The task failed for another reason (its type is in the worker's log).
    PROJECTION_FAILED = ErrorCode.PROJECTION_FAILED.value
    #: No result came back within the chunk timeout.
    TIMED_OUT = "TIMED_OUT"


def _projector(store: CanonicalStore) -> RunProgressProjector:
    return RunProgressProjector(
        max_facts=store.limits.max_facts, max_facts_bytes=store.limits.max_facts_bytes
    )


def observe_run(
    store: CanonicalStore, run_id: str, projector_version: str | None = None
) -> ObservedFacts:
    """The run's observed facts: what ``ToolBoundary.observe`` returns, for readers that
    have a store but no registry or dispatcher (the ``project_run`` task, the CLI, the web);
    with ``projector_version``, built from that version's side projections where present."""
    if projector_version is not None:
        return observe_version(store, run_id, projector_version, _projector(store))
    return _projector(store).project(run_id, store.progress(run_id))


def observe_runs(store: CanonicalStore, run_ids: list[str]) -> list[dict[str, Any]]:
    """One line per run id, in order: its observed facts as JSON (what ``observe_run`` gives),
    or an ``INVALID_RUN_ID`` error line. Every run's records are read in one batch."""
    safe = [run_id for run_id in run_ids if is_safe_id(run_id)]
    progress = store.progress_many(safe) if safe else {}
    projector = _projector(store)
    return [
        projector.project_json(run_id, progress[run_id])
        if run_id in progress
        else error_line(None, RunError.INVALID_RUN_ID)
        for run_id in run_ids
    ]


def observe_runs_text(store: CanonicalStore, run_ids: list[str]) -> str:
    """``observe_runs`` as the JSON text of its list of lines (what the ``project_runs`` task
    answers), built from the records' fields as read where the store reads them so
    (``progress_rows_many``): no model per record, and each fact written once."""
    safe = [run_id for run_id in run_ids if is_safe_id(run_id)]
    rows = store.progress_rows_many(safe) if safe else {}
    if rows is None:
        return _lines_text(observe_runs(store, run_ids))
    projector = _projector(store)
    invalid = _lines_text(error_line(None, RunError.INVALID_RUN_ID))
    texts = [
        projector.project_rows(run_id, rows[run_id]) if run_id in rows else invalid
        for run_id in run_ids
    ]
    return f"[{','.join(texts)}]"


def _lines_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def error_line(run_id: str | None, error: RunError) -> dict[str, Any]:
    return {"run_id": run_id, "error": error.value}


# --- A call in flight -----------------------------------------------------------------------


def progress_of(store: CanonicalStore, record: CanonicalRecord) -> CallProgress | None:
    """A PROJECTING call's progress: what its record says, and for a call that has not
    started, whether flow control holds it waiting for a slot (one read of its tool's flow
    control: ``boundary.flow.waiting_progress``)."""
    ops = getattr(store, "flow_ops", None)
    if record.started_at is None and ops is not None:
        return waiting_progress(ops, record)
    return CallProgress.of(record)


def call_view(
    record: CanonicalRecord, now: datetime, progress: CallProgress | None = None
) -> dict[str, Any]:
    """What ``watch`` (and ``runs``) say of one running call: never its request or raw.
    ``progress``: as ``progress_of`` read it (else the record's own)."""
    if progress is None:
        progress = CallProgress.of(record)
    return {
        "tool_call_id": record.tool_call_id,
        "tool_name": record.tool_name,
        "attempt": record.attempt,
        "started": record.started_at is not None,
        "waiting": bool(progress and progress.waiting),
        "ahead": progress.ahead if progress else None,
        "fraction": progress.fraction if progress else None,
        "message": progress.message if progress else None,
        "running_s": None
        if record.started_at is None
        else round((now - record.started_at).total_seconds(), 1),
        "heartbeat_age_s": None
        if record.heartbeat_at is None
        else round((now - record.heartbeat_at).total_seconds(), 1),
    }


# --- A limited tool -------------------------------------------------------------------------


def limits_view(status: FlowStatus) -> dict[str, Any]:
    """A limited tool's row (``tool-boundary limits``, the web's limits page): its limits in
    force, calls holding a slot and waiting (by tenant), starts in its rate period."""
    limits = status.limits
    rate = None
    if limits.rate_limit is not None and limits.rate_period_s is not None:
        rate = {"limit": limits.rate_limit, "period_s": limits.rate_period_s}
    return {
        "tool": status.tool,
        "concurrency": limits.concurrency,
        "tenant_concurrency": limits.tenant_concurrency,
        "rate_limit": rate,
        "max_waiting": limits.max_waiting,
        "override": status.override,
        "running": status.running,
        "waiting": status.waiting,
        "running_by_tenant": status.running_by_tenant,
        "waiting_by_tenant": status.waiting_by_tenant,
        "starts_in_period": status.starts_in_period if rate else None,
        "stale_holders": status.stale_holders,
    }


# --- Text -----------------------------------------------------------------------------------


def printable(text: str) -> str:
    """Escapes control and format characters (terminal escapes, bidi overrides) that tool
    output could carry into an operator's terminal; keeps newlines and tabs."""
    return "".join(
        c if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf") else f"\\u{ord(c):04x}"
        for c in text
    )


def compact(value: Any, limit: int, *, cut: str = "") -> str:
    """``value`` as one line of JSON, cut past ``limit`` characters: ``... (+N<cut>)``."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= limit else f"{text[:limit]}... (+{len(text) - limit}{cut})"


def in_lists(items: Iterable[str], size: int) -> Iterator[list[str]]:
    """``items`` in lists of ``size`` (the last may be shorter), read as they are iterated."""
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
