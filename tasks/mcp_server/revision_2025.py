"""2025-11-25 connections: the core spec's Tasks (``tasks_2025`` has the mapping). A client
asks for a task with ``params.task``; each tool's ``execution.taskSupport`` says whether it
may, or must."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from boundary import CanonicalKey, ErrorCode, StoreError
from boundary.store.redis_tasks import TaskEntry
from tasks.mcp_server import tasks_2025
from tasks.mcp_server.calls import TaskState
from tasks.mcp_server.errors import (
    INVALID_PARAMS,
    method_not_found,
    store_unavailable,
    task_not_found,
)
from tasks.mcp_server.revision import Ctx, Revision


class Revision2025(Revision):
    """Tasks as the 2025-11-25 specification defines them."""

    def execution(self, tool_name: str) -> types.ToolExecution | None:
        return types.ToolExecution(task_support=self.core.support_of(tool_name))

    def admit(self, ctx: Ctx, tool_name: str, augmented: bool) -> None:
        support = self.core.support_of(tool_name)
        if augmented and support == "forbidden":
            raise tasks_2025.not_task_augmentable(
                "Task augmentation is not supported for this tool"
            )
        if not augmented and support == "required":
            raise tasks_2025.task_required()

    def routes_task_call(self, params: Mapping[str, Any] | None) -> bool:
        return params is not None and params.get("task") is not None

    async def as_task(
        self, ctx: Ctx, key: CanonicalKey, params: types.CallToolRequestParams
    ) -> dict[str, Any] | None:
        """A task for a call that asked for one (``params.task``): a random id bound to the
        requester; on stdio, watched for its progress and its end."""
        if params.task is None:
            return None
        core = self.core
        state = await core.state(key)
        if state is None:
            raise store_unavailable()
        entry = await core.add_entry(ctx, key, params.task.ttl, state)
        if ctx.request is None:
            self._watch(ctx, entry)
        return tasks_2025.created(entry, state, core.options.poll_interval_ms)

    def _watch(self, ctx: Ctx, entry: TaskEntry) -> None:
        """While this connection (stdio) lives: the task's progress, and
        ``notifications/tasks/status`` when it ends."""
        core = self.core

        async def ended() -> None:
            state = await core.calls.task_state(entry.key)
            if state is None:
                return
            task = tasks_2025.task_of(entry, state, core.options.poll_interval_ms)
            await ctx.session.send_notification(
                tasks_2025.status_notification(task)  # type: ignore[arg-type]
            )

        core.watchers.watch(ctx, core.calls, entry.key, core.options.progress_s, ended)

    async def _task(self, ctx: Ctx, task_id: str) -> tuple[TaskEntry, TaskState]:
        entry = await self.core.entry(ctx, task_id)
        state = await self.core.state(entry.key)
        if state is None:
            raise task_not_found()
        return entry, state

    async def get_task(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        entry, state = await self._task(ctx, task_id)
        return tasks_2025.task_of(entry, state, self.core.options.poll_interval_ms)

    async def cancel_task(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        """A finished task is refused (``-32602``); a working one is sealed ``CANCELLED`` and
        answered with its ``Task``."""
        entry, state = await self._task(ctx, task_id)
        if state.outcome is not None:
            status, _ = tasks_2025.status_of(state.outcome, None)
            raise MCPError(
                INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{status}'"
            )
        outcome = await self.core.calls.cancel(entry.key)
        if outcome.error_code is ErrorCode.RECORD_NOT_FOUND:
            raise task_not_found()
        if outcome.error_code is ErrorCode.STORE_UNAVAILABLE:
            raise store_unavailable()
        return await self.get_task(ctx, task_id)

    async def task_result(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        """Waits until the task is terminal (woken by the seal), then answers what the call
        answers, with the related-task ``_meta``."""
        entry = await self.core.entry(ctx, task_id)
        while True:
            outcome = await self.core.calls.outcome(entry.key, tasks_2025.RESULT_WAIT_S)
            if outcome is not None and outcome.error_code is ErrorCode.RECORD_NOT_FOUND:
                raise task_not_found()  # the record expired under the task
            if outcome is not None:
                return tasks_2025.final_result(entry, outcome)
            # Still running: the task must still exist to be waited on.
            await self.core.entry(ctx, task_id)

    async def list_tasks(self, ctx: Ctx, cursor: str | None) -> dict[str, Any]:
        """The requester's tasks, newest first, a page at a time from its index (never a
        SCAN); the cursor is opaque to the client."""
        core = self.core
        if not core.options.list_tasks:
            raise method_not_found()
        after = _decode_cursor(cursor)
        try:
            entries, following = await core.tasks.page(
                core.requester(ctx), after, tasks_2025.LIST_PAGE_SIZE
            )
            tasks: list[dict[str, Any]] = []
            for entry in entries:
                state = await core.calls.task_state(entry.key)
                if state is not None:
                    tasks.append(tasks_2025.task_of(entry, state, core.options.poll_interval_ms))
        except StoreError:
            raise store_unavailable() from None
        result: dict[str, Any] = {"tasks": tasks}
        if following is not None:
            result["nextCursor"] = base64.urlsafe_b64encode(following.encode()).decode()
        return result


def _decode_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        member = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        raise MCPError(INVALID_PARAMS, "Invalid cursor") from None
    head, sep, task_id = member.partition(":")
    if not (sep and head.isdigit() and task_id):
        raise MCPError(INVALID_PARAMS, "Invalid cursor")
    return member
