"""2026-07-28 connections: the Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663)
for a request that declares it; ``results`` has its mapping. ``tasks/get``, ``tasks/update``
and ``tasks/cancel``, and ``notifications/tasks/status`` on a ``subscriptions/listen`` stream;
no ``tasks/result`` and no ``tasks/list``.

The server decides which calls run as tasks: each tool's task support (as on 2025-11-25) says
``forbidden`` (never: the call is answered when it ends), ``optional`` (a task for a request
that declares the extension) or ``required`` (always; a request that does not declare the
extension is refused ``-32021``, nothing stored).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from boundary import CanonicalKey, ErrorCode
from boundary.store.redis_tasks import TaskEntry
from tasks.mcp_server.core import task_id_of
from tasks.mcp_server.errors import (
    INVALID_PARAMS,
    missing_tasks_capability,
    store_unavailable,
    task_not_found,
)
from tasks.mcp_server.results import TASKS_EXTENSION, created_task, task_fields
from tasks.mcp_server.revision import Ctx, Revision

#: The notification of a task's state (the extension's schema), sent on a listen stream.
TASK_STATUS_METHOD = "notifications/tasks/status"
#: The ``subscriptions/listen`` filter field that names the tasks to hear about: the
#: extension's schema calls it ``tasksStatus``, its SEP text ``taskIds``; either is taken and
#: acknowledged under the name the client used.
TASK_FILTER_FIELDS = ("tasksStatus", "taskIds")
#: Most tasks one listen stream follows.
MAX_LISTENED_TASKS = 100
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def declares_tasks(ctx: Ctx) -> bool:
    """True when this request's client capabilities name the Tasks extension."""
    capabilities = ctx.session.client_capabilities
    return bool(
        capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions
    )


def _fixed(entry: TaskEntry) -> dict[str, Any]:
    """A task's TTL and creation as its entry fixed them (stable between reads)."""
    return {
        "fixed_ttl_ms": entry.ttl_ms,
        "created_at": datetime.fromtimestamp(entry.created_ms / 1000, tz=UTC),
    }


class _Notification(types.Notification[dict[str, Any], str]):
    """A notification the SDK has no type for (the extension's), sent as given."""


@dataclass(frozen=True)
class _Listened:
    task_id: str
    key: CanonicalKey
    fixed: dict[str, Any]


class Revision2026(Revision):
    """The Tasks extension: the server decides, per tool, which calls become tasks."""

    announces_tasks = False

    def admit(self, ctx: Ctx, tool_name: str, augmented: bool) -> None:
        super().admit(ctx, tool_name, augmented)
        if self.core.options.support_of(tool_name) == "required" and not declares_tasks(ctx):
            raise missing_tasks_capability()

    async def as_task(
        self, ctx: Ctx, key: CanonicalKey, params: types.CallToolRequestParams
    ) -> dict[str, Any] | None:
        core = self.core
        if not declares_tasks(ctx) or core.options.support_of(params.name) == "forbidden":
            return None
        state = await core.state(key)
        if state is None:
            return None
        poll_ms = core.options.poll_interval_ms
        if not core.tasks.available:
            return created_task(task_id_of(key), state, poll_ms)
        entry = await core.add_entry(ctx, key, None, state)
        return created_task(entry.task_id, state, poll_ms, **_fixed(entry))

    async def _key(self, ctx: Ctx, task_id: str) -> tuple[CanonicalKey, dict[str, Any]]:
        """The task's call and its fixed fields; ``-32021`` for a request that does not
        declare the extension."""
        if not declares_tasks(ctx):
            raise missing_tasks_capability()
        found = await self.core.found(ctx, task_id)
        if isinstance(found, TaskEntry):
            return found.key, _fixed(found)
        return found, {}

    async def get_task(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        key, fixed = await self._key(ctx, task_id)
        state = await self.core.state(key)
        if state is None:
            raise task_not_found()
        return task_fields(task_id, state, self.core.options.poll_interval_ms, **fixed)

    async def update_task(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        """Acknowledged for a known task; this server's tools never ask for input, so any
        responses are for no outstanding request and are ignored."""
        key, _ = await self._key(ctx, task_id)
        if await self.core.state(key) is None:
            raise task_not_found()
        return {}

    async def cancel_task(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        """Seals a working task's record ERROR ``CANCELLED`` (one atomic script) and revokes
        its queued work; a finished task stays as it is (the extension: ``{}`` either way)."""
        key, _ = await self._key(ctx, task_id)
        outcome = await self.core.calls.cancel(key)
        if outcome.error_code is ErrorCode.RECORD_NOT_FOUND:
            raise task_not_found()
        if outcome.error_code is ErrorCode.STORE_UNAVAILABLE:
            raise store_unavailable()
        return {}

    async def listen(
        self, ctx: Ctx, params: types.SubscriptionsListenRequestParams
    ) -> dict[str, Any]:
        """``subscriptions/listen`` for the requester's tasks: acknowledged with the tasks it
        follows (an unknown or another requester's id is left out), then on this stream a
        ``notifications/tasks/status`` (the ``DetailedTask``, as ``tasks/get``) at once and
        whenever a task changes (its heartbeat: message and fraction), until every one is
        terminal; then the graceful close. No other notification kind is served."""
        requested = params.notifications.model_extra or {}
        field = next((name for name in TASK_FILTER_FIELDS if name in requested), None)
        meta = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        listened: list[_Listened] = []
        if field is not None:
            ids = requested[field]
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise MCPError(INVALID_PARAMS, f"notifications.{field} must list task ids")
            if not declares_tasks(ctx):
                raise missing_tasks_capability()
            for task_id in list(dict.fromkeys(ids))[:MAX_LISTENED_TASKS]:
                try:
                    key, fixed = await self._key(ctx, task_id)
                except MCPError:
                    continue
                listened.append(_Listened(task_id, key, fixed))
        agreed = {field: [t.task_id for t in listened]} if field is not None else {}
        await _notify(
            ctx,
            "notifications/subscriptions/acknowledged",
            {"notifications": agreed, "_meta": meta},
        )
        await self._follow(ctx, listened, meta)
        closed = types.SubscriptionsListenResult(_meta=meta)
        return closed.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _follow(self, ctx: Ctx, listened: list[_Listened], meta: dict[str, Any]) -> None:
        core = self.core
        sent: dict[str, dict[str, Any]] = {}
        while listened:
            for task in list(listened):
                state = await core.state(task.key)
                if state is None:  # expired: nothing more to tell of it
                    listened.remove(task)
                    continue
                fields = task_fields(
                    task.task_id, state, core.options.poll_interval_ms, **task.fixed
                )
                if fields != sent.get(task.task_id):
                    sent[task.task_id] = fields
                    note_meta = {**fields.get("_meta", {}), **meta}
                    await _notify(ctx, TASK_STATUS_METHOD, {**fields, "_meta": note_meta})
                if fields["status"] in TERMINAL:
                    listened.remove(task)
            if listened:
                # Woken by the first one's seal; the others are read again at least every
                # progress_s / 2.
                await core.calls.wait(listened[0].key, core.options.progress_s / 2)


async def _notify(ctx: Ctx, method: str, params: dict[str, Any]) -> None:
    note = _Notification(method=method, params=params)
    await ctx.session.send_notification(note, related_request_id=ctx.request_id)  # type: ignore[arg-type]
