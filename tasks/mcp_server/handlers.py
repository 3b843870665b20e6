"""The request handlers: ``tools/list``, ``tools/call`` and ``tasks/*``. Each picks its
request's revision once (``Revisions.of``) and lets it decide what that revision does with
tasks; the call itself (preflight, record, dispatch, wait) is the same on every revision."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from boundary import ErrorCode, ToolBoundary, ToolCallEnvelope
from tasks.mcp_server import tasks_2025
from tasks.mcp_server.core import ServerCore
from tasks.mcp_server.options import ServerOptions
from tasks.mcp_server.progress import wait_plain
from tasks.mcp_server.results import (
    MINTED_PREFIX,
    RUN_ID_META,
    TOOL_CALL_ID_META,
    error_result,
    ids_meta,
    tool_entry,
    tool_result,
)
from tasks.mcp_server.revision import Ctx, Revision
from tasks.mcp_server.revision_2025 import Revision2025
from tasks.mcp_server.revision_2026 import Revision2026


class TaskParams(types.RequestParams):
    """``tasks/get``, ``tasks/cancel`` and ``tasks/result`` params."""

    task_id: str


class UpdateTaskParams(TaskParams):
    """``tasks/update`` params (this server never asks for input, so nothing is pending)."""

    input_responses: dict[str, Any] | None = None


class Revisions:
    """One ``Revision`` object per protocol revision the server speaks, built once."""

    def __init__(self, core: ServerCore) -> None:
        self.none = Revision(core)
        self.by_version: dict[str, Revision] = {tasks_2025.TASKS_REVISION: Revision2025(core)}
        modern = Revision2026(core)
        self.by_version.update(dict.fromkeys(MODERN_PROTOCOL_VERSIONS, modern))

    def of_version(self, version: str | None) -> Revision:
        """The revision's behaviour; a revision without tasks for any other (or none yet)."""
        return self.by_version.get(version or "", self.none)

    def of(self, ctx: ServerRequestContext[Any, Any]) -> Revision:
        return self.of_version(ctx.protocol_version)


class BoundaryMCP:
    """The handlers over a ``ToolBoundary``, configured by ``options``.

    Raises:
        ConfigurationError: OAuth on a store that keeps no run owners (not Redis).
    """

    def __init__(self, boundary: ToolBoundary, options: ServerOptions) -> None:
        self.core = ServerCore(boundary, options)
        self.options = options
        self.revisions = Revisions(self.core)

    async def list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        revision = self.revisions.of(ctx)
        tools = []
        for spec in self.core.registry:
            if spec.read_only and self.core.may_call(ctx, spec.name):
                tool = tool_entry(spec)
                tool.execution = revision.execution(spec.name)
                tools.append(tool)
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        """Preflight, record and dispatch through the boundary; then a task (when the
        revision answers with one) or the outcome."""
        core, options = self.core, self.options
        revision = self.revisions.of(ctx)
        augmented = params.task is not None
        if not core.may_call(ctx, params.name):
            # First: a tool the token may not call is refused alike whether it exists or not,
            # and before any run is looked up or anything is stored (the preflight's code).
            return _refusal(augmented, ErrorCode.UNAUTHORIZED)
        revision.admit(ctx, params.name, augmented)
        meta: dict[str, Any] = dict(params.meta or {})
        run_id = meta.get(RUN_ID_META) or options.run_id
        if not isinstance(run_id, str):
            return _refusal(augmented, ErrorCode.RUN_NOT_FOUND)
        tool_call_id = meta.get(TOOL_CALL_ID_META)
        agent_id = tool_call_id is not None
        if tool_call_id is None:
            if options.require_call_id:
                return _refusal(augmented, ErrorCode.INVALID_TOOL_CALL_ID)
            # MCP has no call id of its own (a JSON-RPC request id repeats across reconnects):
            # mint one, use it as the canonical id, and return it.
            tool_call_id = f"{MINTED_PREFIX}{uuid.uuid4()}"
        principal = tasks_2025.principal(ctx) if options.oauth else None
        run = await core.calls.get_run(run_id, principal)
        if isinstance(run, ErrorCode):
            return _refusal(augmented, run)
        envelope = ToolCallEnvelope(
            run_id=run_id,
            tool_call_id=tool_call_id,
            tool_name=params.name,
            arguments=params.arguments if params.arguments is not None else {},
        )
        # Shielded: a cancellation that arrives while the call is being recorded and
        # dispatched (its tool may already run) is handled below, with the call's key.
        with anyio.CancelScope(shield=True):
            submission = await core.calls.submit(envelope, run)
        if submission.outcome is not None:
            out_meta = ids_meta(run_id, tool_call_id) if isinstance(tool_call_id, str) else None
            if augmented:
                raise tasks_2025.refused(submission.outcome.error_code, out_meta)
            return tool_result(submission.outcome, out_meta)
        assert submission.key is not None
        key = submission.key
        task = await revision.as_task(ctx, key, params)
        if task is not None:
            return task
        try:
            outcome = await wait_plain(
                ctx, core.calls, key, call_wait_s=options.call_wait_s, progress_s=options.progress_s
            )
        except anyio.get_cancelled_exc_class():
            # The client cancelled the request or went away (closed session, stdio pipe): the
            # call is cancelled too, unless it carries the agent's own id (it can be asked
            # for again, so it outlives the connection).
            if not agent_id:
                with anyio.CancelScope(shield=True):
                    await core.calls.cancel(key)
            raise
        if outcome is None:
            # A plain call must end with an answer that stays true: the call is cancelled
            # (sealed CANCELLED unless it sealed first, in which case that outcome is answered).
            outcome = await core.calls.cancel(key)
        return tool_result(outcome, ids_meta(key.run_id, key.tool_call_id))

    async def get_task(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        return await self.revisions.of(ctx).get_task(ctx, params.task_id)

    async def update_task(self, ctx: Ctx, params: UpdateTaskParams) -> dict[str, Any]:
        return await self.revisions.of(ctx).update_task(ctx, params.task_id)

    async def cancel_task(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        return await self.revisions.of(ctx).cancel_task(ctx, params.task_id)

    async def task_result(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        return await self.revisions.of(ctx).task_result(ctx, params.task_id)

    async def list_tasks(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> dict[str, Any]:
        cursor = params.cursor if params is not None else None
        return await self.revisions.of(ctx).list_tasks(ctx, cursor)

    async def listen(
        self, ctx: Ctx, params: types.SubscriptionsListenRequestParams
    ) -> dict[str, Any]:
        return await self.revisions.of(ctx).listen(ctx, params)


def _refusal(augmented: bool, code: ErrorCode) -> types.CallToolResult:
    """A call refused before it had an outcome of its own: its ``isError`` result, or for a
    task-augmented call (no task was created) the spec's protocol error."""
    if augmented:
        raise tasks_2025.refused(code, None)
    return error_result(code)
