"""2026-07-28 connections: the Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663)
for a request that declares it; ``results`` has its mapping. ``tasks/get``, ``tasks/update``
and ``tasks/cancel`` only; no ``tasks/result`` and no ``tasks/list``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import mcp_types as types

from boundary import CanonicalKey, ErrorCode
from boundary.store.redis_tasks import TaskEntry
from tasks.mcp_server.core import task_id_of
from tasks.mcp_server.errors import missing_tasks_capability, store_unavailable, task_not_found
from tasks.mcp_server.results import TASKS_EXTENSION, created_task, task_fields
from tasks.mcp_server.revision import Ctx, Revision


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


class Revision2026(Revision):
    """The Tasks extension: a request that declares it gets its call as a task."""

    announces_tasks = False

    async def as_task(
        self, ctx: Ctx, key: CanonicalKey, params: types.CallToolRequestParams
    ) -> dict[str, Any] | None:
        if not declares_tasks(ctx):
            return None
        core = self.core
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
