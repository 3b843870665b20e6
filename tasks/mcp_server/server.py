"""The MCP server over a ``ToolBoundary``: ``tools/list``, ``tools/call``, and the Tasks
extension (``tasks/get``, ``tasks/update``, ``tasks/cancel``) answered from the canonical record,
so any server process answers for any task, across restarts.

The SDK (``mcp`` 2.x) carries extension methods and a ``resultType: "task"`` result but keeps no
tasks itself; these handlers follow the extension's published schema.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from boundary import (
    CanonicalKey,
    ErrorCode,
    StoreError,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks.mcp_server.calls import BoundaryCalls
from tasks.mcp_server.results import (
    MINTED_PREFIX,
    RUN_ID_META,
    TASKS_EXTENSION,
    TOOL_CALL_ID_META,
    created_task,
    error_result,
    ids_meta,
    task_fields,
    tool_entry,
    tool_result,
)

logger = logging.getLogger(__name__)

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])

#: Suggested task polling interval, milliseconds.
DEFAULT_POLL_INTERVAL_MS = 500
#: Longest a plain (not task-augmented) ``tools/call`` waits for its outcome, seconds.
DEFAULT_CALL_WAIT_S = 600.0

#: JSON-RPC codes the Tasks extension names.
INVALID_PARAMS = -32602
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
INTERNAL_ERROR = -32603


class TaskParams(types.RequestParams):
    """``tasks/get`` and ``tasks/cancel`` params."""

    task_id: str


class UpdateTaskParams(TaskParams):
    """``tasks/update`` params (this server never asks for input, so nothing is pending)."""

    input_responses: dict[str, Any] | None = None


def task_id_of(key: CanonicalKey) -> str:
    """The task id is the call's canonical identity, ``<run_id>:<tool_call_id>``: one task per
    call, and any server process finds the record from it."""
    return key.identity


def _task_key(task_id: str) -> CanonicalKey:
    try:
        return CanonicalKey.from_identity(task_id)
    except ValidationError:
        raise _task_not_found() from None


def _task_not_found() -> MCPError:
    return MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found")


def _store_unavailable() -> MCPError:
    return MCPError(INTERNAL_ERROR, ErrorCode.STORE_UNAVAILABLE.message)


def _guarded(handler: Handler) -> Handler:
    """Any exception but a protocol error becomes one fixed ``-32603``: on a 2025-11-25
    connection the SDK would otherwise send the exception's text, which may hold a URL or a
    payload. Only the exception's type is logged."""

    @functools.wraps(handler)
    async def guarded(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        try:
            return await handler(ctx, params)
        except MCPError:
            raise
        except Exception as exc:
            logger.error("MCP %s failed: %s", ctx.method, type(exc).__name__)
            raise MCPError(INTERNAL_ERROR, "Internal error") from None

    return cast("Handler", guarded)


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """True when this request's client capabilities name the Tasks extension (2026-07-28+)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(
        capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions
    )


def _require_tasks(ctx: ServerRequestContext[Any, Any]) -> None:
    if not declares_tasks(ctx):
        raise MCPError(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


class BoundaryMCP:
    """The handlers. ``run_id`` is the server's run (``--run``) for requests that name none.

    Args:
        boundary: the boundary every call goes through.
        run_id: the run of requests whose ``_meta`` names none.
        poll_interval_ms: the ``pollIntervalMs`` tasks suggest.
        call_wait_s: how long a plain ``tools/call`` waits for its outcome before it cancels
            the call (a task-augmented call never waits).
    """

    def __init__(
        self,
        boundary: ToolBoundary,
        *,
        run_id: str | None = None,
        poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
        call_wait_s: float = DEFAULT_CALL_WAIT_S,
    ) -> None:
        self.calls = BoundaryCalls(boundary)
        self.registry = boundary.registry
        self.run_id = run_id
        self.poll_interval_ms = poll_interval_ms
        self.call_wait_s = call_wait_s

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[tool_entry(spec) for spec in self.registry if spec.read_only]
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        """Preflight, record and dispatch through the boundary; then either a task handle
        (when this request declares the Tasks extension) or the outcome."""
        meta: dict[str, Any] = dict(params.meta or {})
        run_id = meta.get(RUN_ID_META) or self.run_id
        if not isinstance(run_id, str):
            return error_result(ErrorCode.RUN_NOT_FOUND)
        tool_call_id = meta.get(TOOL_CALL_ID_META)
        if tool_call_id is None:
            # MCP has no call id of its own (a JSON-RPC request id repeats across reconnects):
            # mint one, use it as the canonical id, and return it.
            tool_call_id = f"{MINTED_PREFIX}{uuid.uuid4()}"
        run = await self.calls.get_run(run_id)
        if isinstance(run, ErrorCode):
            return error_result(run)
        envelope = ToolCallEnvelope(
            run_id=run_id,
            tool_call_id=tool_call_id,
            tool_name=params.name,
            arguments=params.arguments if params.arguments is not None else {},
        )
        submission = await self.calls.submit(envelope, run)
        out_meta = ids_meta(run_id, tool_call_id) if isinstance(tool_call_id, str) else None
        if submission.outcome is not None:
            return tool_result(submission.outcome, out_meta)
        assert submission.key is not None
        key = submission.key
        if declares_tasks(ctx):
            state = await self._state(key)
            if state is not None:
                return created_task(task_id_of(key), state, self.poll_interval_ms)
        outcome = await self.calls.outcome(key, self.call_wait_s)
        if outcome is None:
            # A plain call must end with an answer that stays true: the call is cancelled
            # (sealed CANCELLED unless it sealed first, in which case that outcome is answered).
            outcome = await self.calls.cancel(key)
        return tool_result(outcome, ids_meta(key.run_id, key.tool_call_id))

    async def _state(self, key: CanonicalKey) -> Any:
        try:
            return await self.calls.task_state(key)
        except StoreError:
            raise _store_unavailable() from None

    async def get_task(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> dict[str, Any]:
        _require_tasks(ctx)
        key = _task_key(params.task_id)
        state = await self._state(key)
        if state is None:
            raise _task_not_found()
        return task_fields(params.task_id, state, self.poll_interval_ms)

    async def update_task(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> dict[str, Any]:
        """Acknowledged for a known task; this server's tools never ask for input, so any
        responses are for no outstanding request and are ignored."""
        _require_tasks(ctx)
        if await self._state(_task_key(params.task_id)) is None:
            raise _task_not_found()
        return {}

    async def cancel_task(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> dict[str, Any]:
        """Seals a working task's record ERROR ``CANCELLED`` (one atomic script) and revokes
        its queued work; a finished task stays as it is."""
        _require_tasks(ctx)
        key = _task_key(params.task_id)
        outcome = await self.calls.cancel(key)
        if outcome.error_code is ErrorCode.RECORD_NOT_FOUND:
            raise _task_not_found()
        if outcome.error_code is ErrorCode.STORE_UNAVAILABLE:
            raise _store_unavailable()
        return {}


def build_server(
    boundary: ToolBoundary,
    *,
    run_id: str | None = None,
    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
    call_wait_s: float = DEFAULT_CALL_WAIT_S,
    name: str = "tool-boundary",
) -> Server[Any]:
    """A low-level SDK server serving the boundary's registry, with the Tasks extension."""
    handlers = BoundaryMCP(
        boundary, run_id=run_id, poll_interval_ms=poll_interval_ms, call_wait_s=call_wait_s
    )
    server: Server[Any] = Server(name, version="0.1.0", on_list_tools=_guarded(handlers.list_tools))
    server.add_request_handler(
        "tools/call", types.CallToolRequestParams, _guarded(handlers.call_tool)
    )
    server.add_request_handler("tasks/get", TaskParams, _guarded(handlers.get_task))
    server.add_request_handler("tasks/update", UpdateTaskParams, _guarded(handlers.update_task))
    server.add_request_handler("tasks/cancel", TaskParams, _guarded(handlers.cancel_task))
    server.extensions[TASKS_EXTENSION] = {}
    return server
