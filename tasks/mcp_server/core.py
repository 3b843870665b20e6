"""What every revision's handlers share: the boundary's calls, the task index, the options,
and who the requester is. No protocol revision is decided here."""

from __future__ import annotations

import uuid
from typing import Any

from mcp.server.context import ServerRequestContext
from pydantic import ValidationError

from boundary import CanonicalKey, ConfigurationError, StoreError, ToolBoundary
from boundary.store.redis_tasks import TaskEntry, new_task_id
from tasks.mcp_server import tasks_2025
from tasks.mcp_server.calls import BoundaryCalls, TaskIndex, TaskState
from tasks.mcp_server.errors import store_unavailable, task_not_found
from tasks.mcp_server.options import ServerOptions, TaskSupport
from tasks.mcp_server.progress import Watchers


def task_id_of(key: CanonicalKey) -> str:
    """The extension's task id on a store without a task index: the call's canonical identity,
    ``<run_id>:<tool_call_id>`` (on Redis, task ids are random and bound to the requester)."""
    return key.identity


def task_key(task_id: str) -> CanonicalKey:
    """The call behind a task id on a store without a task index."""
    try:
        return CanonicalKey.from_identity(task_id)
    except ValidationError:
        raise task_not_found() from None


class ServerCore:
    """The server's state, built once: the boundary's calls, the MCP task index, the options,
    the stdio session's requester id and the task watchers.

    Raises:
        ConfigurationError: OAuth on a store that keeps no run owners (not Redis).
    """

    def __init__(self, boundary: ToolBoundary, options: ServerOptions) -> None:
        self.calls = BoundaryCalls(boundary)
        if options.oauth and self.calls.owners is None:
            raise ConfigurationError("OAuth issuers need the Redis store (runs get owners)")
        self.options = options
        self.tasks = TaskIndex(boundary)
        self.registry = boundary.registry
        #: The auth context of requests with no HTTP request (stdio: one process, one session).
        self.session_owner = f"session-{uuid.uuid4().hex}"
        self.watchers = Watchers()

    def support_of(self, tool_name: str) -> TaskSupport:
        """The tool's task support (``forbidden`` when this store has no task index)."""
        if not self.tasks.available:
            return "forbidden"
        return self.options.support_of(tool_name)

    def may_call(self, ctx: ServerRequestContext[Any, Any], tool_name: str) -> bool:
        """Over an OAuth door, whether the request's token allows the tool; else always."""
        if not self.options.oauth:
            return True
        principal = tasks_2025.principal(ctx)
        return principal is not None and principal.may_call(tool_name)

    def requester(self, ctx: ServerRequestContext[Any, Any]) -> str:
        return tasks_2025.requester(ctx, self.session_owner)

    async def state(self, key: CanonicalKey) -> TaskState | None:
        try:
            return await self.calls.task_state(key)
        except StoreError:
            raise store_unavailable() from None

    async def add_entry(
        self,
        ctx: ServerRequestContext[Any, Any],
        key: CanonicalKey,
        ttl_ms: int | None,
        state: TaskState,
    ) -> TaskEntry:
        """A new random task id for the call, bound to the requester, in the task index."""
        entry = tasks_2025.new_entry(new_task_id(), key, self.requester(ctx), ttl_ms, state)
        try:
            await self.tasks.add(entry)
        except StoreError:
            raise store_unavailable() from None
        return entry

    async def entry(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskEntry:
        """The requester's task, else the spec's "not found" (another requester's task is not
        found either)."""
        try:
            entry = await self.tasks.get(task_id)
        except StoreError:
            raise store_unavailable() from None
        if entry is None or entry.owner != self.requester(ctx):
            raise task_not_found()
        return entry

    async def found(
        self, ctx: ServerRequestContext[Any, Any], task_id: str
    ) -> TaskEntry | CanonicalKey:
        """The extension's task: its entry (random ids), or its key (a store with no task
        index: the id is the canonical identity)."""
        if not self.tasks.available:
            return task_key(task_id)
        return await self.entry(ctx, task_id)
