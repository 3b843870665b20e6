"""What the server answers, built from the boundary's values: tool listings, tool results and
task states. Only bounded results, stable codes and fixed sentences go out; nothing raw."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import mcp_types as types

from boundary import ErrorCode, ToolOutcome, ToolSpec
from tasks.mcp_server.calls import TaskState

#: The Tasks extension (SEP-2663).
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: ``_meta`` keys of the agent's ids, on requests and on every result.
RUN_ID_META = "tool-boundary/run_id"
TOOL_CALL_ID_META = "tool-boundary/tool_call_id"
#: ``_meta`` key of a working task's progress (2026-07-28): ``{"progress", "total"}``, the
#: tool's last heartbeat fraction, as ``notifications/progress`` would carry it.
PROGRESS_META = "tool-boundary/progress"
#: Prefix of the tool_call_id the server mints when a request carries none.
MINTED_PREFIX = "mcp-"

#: The schema of a tool that declares none: any JSON object.
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def tool_entry(spec: ToolSpec) -> types.Tool:
    """The MCP listing of a registered read-only tool (description and input schema when the
    spec declares them)."""
    return types.Tool(
        name=spec.name,
        description=spec.description or None,
        input_schema=dict(spec.input_schema or ANY_OBJECT),
        annotations=types.ToolAnnotations(read_only_hint=True),
    )


def ids_meta(run_id: str, tool_call_id: str) -> dict[str, Any]:
    return {RUN_ID_META: run_id, TOOL_CALL_ID_META: tool_call_id}


def tool_result(outcome: ToolOutcome, meta: dict[str, Any] | None) -> types.CallToolResult:
    """A sealed outcome as a ``CallToolResult``: its one text rendering (``as_text``, the same
    the framework adapters give a model) as text content, and the same object as structured
    content. READY: status, evidence status, the bounded result (and scope). ERROR:
    ``isError`` with the status, the code and its fixed sentence, nothing else."""
    text = outcome.as_text()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=json.loads(text),
        is_error=outcome.is_error,
        _meta=meta,
    )


def error_result(code: ErrorCode, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    """A call refused before it had an outcome of its own (no run, store down)."""
    return tool_result(ToolOutcome.error(None, code), meta)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_status(outcome: ToolOutcome | None) -> str:
    """PROJECTING is ``working``; a cancelled call is ``cancelled``; every other sealed call is
    ``completed``, an ERROR one with an ``isError`` result (SEP-2663 keeps ``failed`` for
    JSON-RPC errors, which a sealed record never is)."""
    if outcome is None:
        return "working"
    if outcome.error_code is ErrorCode.CANCELLED:
        return "cancelled"
    return "completed"


def task_fields(
    task_id: str,
    state: TaskState,
    poll_interval_ms: int,
    *,
    fixed_ttl_ms: int | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """A ``DetailedTask``: the record's status, timestamps and TTL, its result once completed,
    and while working the tool's last heartbeat (its message as ``statusMessage``, its fraction
    in ``_meta``). ``ttlMs`` is ``fixed_ttl_ms`` (set once when the task was created, from
    ``created_at``), else from the record's creation to its expiry as Redis keeps it."""
    status = task_status(state.outcome)
    created = created_at or state.created_at
    created_ms = int(created.timestamp() * 1000)
    ttl_ms = fixed_ttl_ms
    if ttl_ms is None and state.ttl_ms is not None:
        ttl_ms = max(0, int(time.time() * 1000) + state.ttl_ms - created_ms)
    fields: dict[str, Any] = {
        "taskId": task_id,
        "status": status,
        "createdAt": _iso(created),
        "lastUpdatedAt": _iso(state.updated_at),
        "ttlMs": ttl_ms,
        "pollIntervalMs": poll_interval_ms,
    }
    record = state.record
    if status == "cancelled":
        fields["statusMessage"] = ErrorCode.CANCELLED.message
    elif status == "working":
        if state.status_message:
            # The tool's own status line (heartbeat(message=...)), documented as agent-visible,
            # or that the call waits for a slot of its limited tool.
            fields["statusMessage"] = state.status_message
        if record.progress is not None:
            # More than the line for a client that polls: how far the tool says it is.
            fields["_meta"] = {PROGRESS_META: {"progress": record.progress, "total": 1.0}}
    elif status == "completed" and state.outcome is not None:
        result = tool_result(state.outcome, ids_meta(record.run_id, record.tool_call_id))
        fields["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return fields


def created_task(
    task_id: str,
    state: TaskState,
    poll_interval_ms: int,
    *,
    fixed_ttl_ms: int | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """A ``CreateTaskResult`` (``resultType: "task"``): the task's seed state (a ``Task``, so
    no inlined result even if the call already finished), with the agent's ids in ``_meta``."""
    record = state.record
    fields = task_fields(
        task_id, state, poll_interval_ms, fixed_ttl_ms=fixed_ttl_ms, created_at=created_at
    )
    fields.pop("result", None)
    meta = {**fields.pop("_meta", {}), **ids_meta(record.run_id, record.tool_call_id)}
    return {"resultType": "task", **fields, "_meta": meta}
