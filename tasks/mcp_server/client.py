"""Client side of the Tasks extension for the SDK's ``Client``: the task handle a
``tools/call`` may answer with, ``tasks/get`` / ``tasks/cancel`` requests, and an extension
that resolves a handle by polling (``Client(..., extensions=[TasksExtension()])``).

The SDK (``mcp`` 2.3) carries claimed result shapes and custom requests but ships no Tasks
types for the 2026-07-28 extension; these follow its published schema.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions

from tasks.mcp_server.results import TASKS_EXTENSION

#: The notification of a task's state, on a ``subscriptions/listen`` stream.
TASK_STATUS_METHOD = "notifications/tasks/status"
#: Statuses a task never leaves.
TERMINAL = frozenset({"completed", "failed", "cancelled"})
#: Poll interval when the server suggests none, seconds.
DEFAULT_POLL_S = 0.5


class TaskIdParams(types.RequestParams):
    task_id: str


class GetTaskRequest(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    #: SEP-2663: the task id travels in the ``Mcp-Name`` header too, for routing.
    name_param = "taskId"


class CancelTaskRequest(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class _TaskFields(types.Result):
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskHandle(_TaskFields):
    """A ``CreateTaskResult``: ``tools/call`` answered that the call runs as a task."""

    result_type: Literal["task"] = "task"


class DetailedTask(_TaskFields):
    """A ``tasks/get`` answer: the task, with its ``result`` once ``completed``."""

    result_type: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def call_result(self) -> types.CallToolResult | None:
        """The ``CallToolResult`` of a completed task."""
        return types.CallToolResult.model_validate(self.result) if self.result else None


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    """``tasks/get``; raises ``MCPError`` (-32602) for an unknown or expired task."""
    return await session.send_request(
        GetTaskRequest(params=TaskIdParams(task_id=task_id)), DetailedTask
    )


async def cancel_task(session: ClientSession, task_id: str) -> None:
    """``tasks/cancel``: an acknowledgement; the task's status says what happened."""
    await session.send_request(
        CancelTaskRequest(params=TaskIdParams(task_id=task_id)), types.Result
    )


async def listen_tasks(
    session: ClientSession, task_ids: Sequence[str], request_id: str = "listen-tasks"
) -> dict[str, Any]:
    """``subscriptions/listen`` for ``task_ids`` (2026-07-28): the server sends each one's
    ``notifications/tasks/status`` (heard by ``TasksExtension(on_status=...)``) until all are
    terminal, then answers: the subscription's graceful close, returned. The SDK's
    ``listen()`` knows no task filter, so the request is stamped and sent as the SDK does."""
    data: dict[str, Any] = {
        "method": "subscriptions/listen",
        "params": {"notifications": {"tasksStatus": list(task_ids)}},
    }
    opts: CallOptions = {"request_id": request_id}
    session._stamp(data, opts)
    return await session._dispatcher.send_raw_request(data["method"], data["params"], opts)


async def wait_task(
    session: ClientSession, task_id: str, *, poll_s: float | None = None, timeout_s: float = 600.0
) -> DetailedTask:
    """Polls until the task is terminal, at the server's suggested interval unless given."""
    with anyio.fail_after(timeout_s):
        while True:
            task = await get_task(session, task_id)
            if task.terminal:
                return task
            interval = poll_s
            if interval is None:
                interval = (task.poll_interval_ms or DEFAULT_POLL_S * 1000) / 1000
            await anyio.sleep(interval)


def cancelled_result(task: DetailedTask) -> types.CallToolResult:
    """What a cancelled task stands for: the call's ERROR ``CANCELLED`` outcome."""
    outcome = {"status": "ERROR", "error_code": "CANCELLED", "message": task.status_message}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(outcome, sort_keys=True))],
        structured_content=outcome,
        is_error=True,
    )


class TasksExtension(ClientExtension):
    """Declares the Tasks extension and turns a task handle back into the tool's result by
    polling, so ``client.call_tool`` returns a ``CallToolResult`` as usual. ``on_status``
    hears ``notifications/tasks/status`` (the tasks a ``listen_tasks`` stream follows)."""

    identifier = TASKS_EXTENSION

    def __init__(self, on_status: Callable[[DetailedTask], Awaitable[None]] | None = None):
        self.on_status = on_status

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self._resolve)]

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        if self.on_status is None:
            return ()
        return [
            NotificationBinding(
                method=TASK_STATUS_METHOD, params_type=DetailedTask, handler=self.on_status
            )
        ]

    async def _resolve(self, handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
        task = await wait_task(ctx.session, handle.task_id)
        result = task.call_result()
        if result is not None:
            return result
        if task.status == "cancelled":
            return cancelled_result(task)
        raise RuntimeError(f"task {handle.task_id} ended {task.status} without a result")
