"""What a protocol revision does with tasks, as one object per revision, chosen once per
request from the revision it speaks (``Revisions.of``).

This module's ``Revision`` is a revision without tasks (2024-11-05 to 2025-06-18): plain calls
only, every ``tasks/*`` is ``-32601``. ``revision_2025`` (the core spec's Tasks) and
``revision_2026`` (the Tasks extension, SEP-2663) override what theirs add.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from boundary import CanonicalKey
from tasks.mcp_server import tasks_2025
from tasks.mcp_server.core import ServerCore
from tasks.mcp_server.errors import method_not_found

Ctx = ServerRequestContext[Any, Any]


class Revision:
    """A revision without tasks; the base of those with them."""

    #: ``initialize`` announces ``capabilities.tasks`` (2025-11-25, and a handshake whose
    #: revision is not known yet).
    announces_tasks = True

    def __init__(self, core: ServerCore) -> None:
        self.core = core

    def execution(self, tool_name: str) -> types.ToolExecution | None:
        """The tool's ``execution`` in ``tools/list``."""
        return None

    def admit(self, ctx: Ctx, tool_name: str, augmented: bool) -> None:
        """Refuses a ``tools/call`` this revision cannot take as asked (``params.task``),
        before anything is stored."""
        if augmented:
            raise tasks_2025.not_task_augmentable("Task augmentation needs a 2025-11-25 connection")

    def routes_task_call(self, params: Mapping[str, Any] | None) -> bool:
        """The request is a task-augmented ``tools/call`` to route apart (2025-11-25)."""
        return False

    async def as_task(
        self, ctx: Ctx, key: CanonicalKey, params: types.CallToolRequestParams
    ) -> dict[str, Any] | None:
        """The accepted call's answer as a task, or ``None``: the call is answered when it
        ends (a plain call)."""
        return None

    async def get_task(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        raise method_not_found()

    async def update_task(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        raise method_not_found()

    async def cancel_task(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        raise method_not_found()

    async def task_result(self, ctx: Ctx, task_id: str) -> dict[str, Any]:
        raise method_not_found()

    async def list_tasks(self, ctx: Ctx, cursor: str | None) -> dict[str, Any]:
        raise method_not_found()

    async def listen(
        self, ctx: Ctx, params: types.SubscriptionsListenRequestParams
    ) -> dict[str, Any]:
        """``subscriptions/listen`` (2026-07-28)."""
        raise method_not_found()
