"""MCP Tasks as the 2025-11-25 specification defines them (``basic/utilities/tasks``), for
clients on a 2025-11-25 connection: task-augmented ``tools/call`` (``params.task``),
``tasks/get``, ``tasks/result``, ``tasks/list``, ``tasks/cancel`` and
``notifications/tasks/status``.

A task is the call's canonical record. Its id is random (``secrets``, 192 bits), mapped to the
record in the store's task index and bound to the requester (the bearer token over HTTP, the
session on stdio): another requester's id is "not found". The agent's canonical ids stay in
``_meta``. The SEP-2663 extension (2026-07-28 connections) keeps its own handlers.

Status mapping on 2025-11-25 (the spec: a tool result with ``isError`` is ``failed``):

=====================  ===========  =========================================
record                 status       statusMessage
=====================  ===========  =========================================
PROJECTING             working      the tool's heartbeat message, else a fixed one
READY                  completed    none
ERROR ``CANCELLED``    cancelled    the code's fixed sentence
ERROR, any other code  failed       ``<CODE>: <the code's fixed sentence>``
=====================  ===========  =========================================
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from boundary import CanonicalKey, ErrorCode, ToolOutcome
from boundary.store.redis_tasks import TaskEntry
from tasks.mcp_server.calls import TaskState
from tasks.mcp_server.errors import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from tasks.mcp_server.oauth.principal import Principal, principal_of_scope
from tasks.mcp_server.results import ids_meta, tool_result

#: The protocol revision whose core spec has Tasks.
TASKS_REVISION = "2025-11-25"
#: ``_meta`` key tying a message to its task.
RELATED_TASK_META = "io.modelcontextprotocol/related-task"

#: ``statusMessage`` of a working task whose tool has said nothing.
WORKING_MESSAGE = "The call is running."
#: ``tasks/list`` page size.
LIST_PAGE_SIZE = 50
#: How long one wait of ``tasks/result`` lasts before it looks again, seconds.
RESULT_WAIT_S = 30.0


def server_capability(*, list_tasks: bool) -> types.ServerTasksCapability:
    """``capabilities.tasks``: ``tools/call`` may be task-augmented, tasks can be cancelled,
    and listed when requesters can be told apart (the spec: a server that cannot identify
    requesters should not offer ``tasks/list``)."""
    return types.ServerTasksCapability(
        list=types.TasksListCapability() if list_tasks else None,
        cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(
            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
        ),
    )


def principal(ctx: ServerRequestContext[Any, Any]) -> Principal | None:
    """The request's checked OAuth principal (HTTP with issuers configured), else ``None``."""
    return principal_of_scope(getattr(ctx.request, "scope", None))


def requester(ctx: ServerRequestContext[Any, Any], session_owner: str) -> str:
    """The requester's auth context: the OAuth principal's owner id (its issuer and tenant
    claim), else a digest of the HTTP ``Authorization`` header (the static bearer token),
    ``anonymous`` over HTTP without one, else the stdio session."""
    checked = principal(ctx)
    if checked is not None:
        return checked.owner
    headers = getattr(ctx.request, "headers", None)
    if headers is None:
        return session_owner
    authorization = headers.get("authorization")
    if not authorization:
        return "anonymous"
    return "token-" + hashlib.sha256(authorization.encode()).hexdigest()[:32]


def not_task_augmentable(reason: str) -> MCPError:
    """A task-augmented ``tools/call`` this tool or connection cannot take: the spec's
    ``-32601``, never run as a plain call instead."""
    return MCPError(METHOD_NOT_FOUND, reason)


def refused(code: ErrorCode | None, meta: dict[str, Any] | None) -> MCPError:
    """A task-augmented call refused before it was recorded (no run, preflight): no task was
    created, so not a ``CreateTaskResult`` but ``-32602`` naming the code and its fixed
    sentence, with the code and the agent's ids as data."""
    code = code or ErrorCode.TOOL_EXECUTION_FAILED
    data: dict[str, Any] = {"error_code": code.value}
    if meta:
        data["_meta"] = meta
    return MCPError(INVALID_PARAMS, f"{code.value}: {code.message}", data)


def task_required() -> MCPError:
    return MCPError(METHOD_NOT_FOUND, "Task augmentation required for tools/call requests")


def _iso_ms(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def status_of(outcome: ToolOutcome | None, progress_message: str | None) -> tuple[str, str | None]:
    """The 2025-11-25 status and statusMessage of a call (the table above)."""
    if outcome is None:
        return "working", progress_message or WORKING_MESSAGE
    if outcome.error_code is ErrorCode.CANCELLED:
        return "cancelled", ErrorCode.CANCELLED.message
    if outcome.is_error:
        code = outcome.error_code or ErrorCode.TOOL_EXECUTION_FAILED
        return "failed", f"{code.value}: {code.message}"
    return "completed", None


def progress_message(state: TaskState) -> str | None:
    """The tool's last heartbeat message (or that the call waits for a slot), if any."""
    return state.status_message or None


def task_of(entry: TaskEntry, state: TaskState, poll_interval_ms: int) -> dict[str, Any]:
    """A ``Task``: status from the record, ``ttl`` fixed at creation (stable between reads),
    ``lastUpdatedAt`` the record's last change (never before the task's creation)."""
    status, message = status_of(state.outcome, progress_message(state))
    updated_ms = max(entry.created_ms, int(state.updated_at.timestamp() * 1000))
    task: dict[str, Any] = {
        "taskId": entry.task_id,
        "status": status,
        "createdAt": _iso_ms(entry.created_ms),
        "lastUpdatedAt": _iso_ms(updated_ms),
        "ttl": entry.ttl_ms,
        "pollInterval": poll_interval_ms,
    }
    if message is not None:
        task["statusMessage"] = message
    return task


def created(entry: TaskEntry, state: TaskState, poll_interval_ms: int) -> dict[str, Any]:
    """A ``CreateTaskResult``, the agent's canonical ids in ``_meta``."""
    key = entry.key
    return {
        "task": task_of(entry, state, poll_interval_ms),
        "_meta": ids_meta(key.run_id, key.tool_call_id),
    }


def new_entry(
    task_id: str, key: CanonicalKey, owner: str, requested_ttl_ms: int | None, state: TaskState
) -> TaskEntry:
    """The task's entry: created now, kept for the requested ttl capped at the record's
    remaining lifetime (the record is the task: it cannot outlive it), else that lifetime."""
    now_ms = int(time.time() * 1000)
    record_left_ms = state.ttl_ms if state.ttl_ms is not None and state.ttl_ms > 0 else None
    if record_left_ms is None:
        ttl_ms = requested_ttl_ms if requested_ttl_ms and requested_ttl_ms > 0 else 86_400_000
    elif requested_ttl_ms and requested_ttl_ms > 0:
        ttl_ms = min(requested_ttl_ms, record_left_ms)
    else:
        ttl_ms = record_left_ms
    return TaskEntry(task_id=task_id, key=key, owner=owner, created_ms=now_ms, ttl_ms=ttl_ms)


def final_result(entry: TaskEntry, outcome: ToolOutcome) -> dict[str, Any]:
    """``tasks/result`` of a terminal task: what the call returns (a ``CallToolResult``, with
    ``isError`` for a failed one) with the related-task ``_meta``; a cancelled task has no
    result: a ``-32603`` error naming it cancelled (a cancelled request is never answered)."""
    if outcome.error_code is ErrorCode.CANCELLED:
        raise MCPError(INTERNAL_ERROR, "Task was cancelled")
    meta = ids_meta(entry.key.run_id, entry.key.tool_call_id)
    meta[RELATED_TASK_META] = {"taskId": entry.task_id}
    result = tool_result(outcome, meta)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def status_notification(task: dict[str, Any]) -> types.TaskStatusNotification:
    return types.TaskStatusNotification(
        params=types.TaskStatusNotificationParams.model_validate(task)
    )
