"""The MCP server over a ``ToolBoundary``: ``tools/list``, ``tools/call``, and the Tasks
extension (``tasks/get``, ``tasks/update``, ``tasks/cancel``) answered from the canonical record,
so any server process answers for any task, across restarts.

The SDK (``mcp`` 2.x) carries extension methods and a ``resultType: "task"`` result but keeps no
tasks itself; these handlers follow the extension's published schema.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from boundary import (
    CanonicalKey,
    ConfigurationError,
    ErrorCode,
    StoreError,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.store.redis_tasks import TaskEntry, new_task_id
from tasks.mcp_server import tasks_2025
from tasks.mcp_server.calls import BoundaryCalls, TaskIndex, TaskState
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
from tasks.mcp_server.tasks_2025 import TaskSupport

logger = logging.getLogger(__name__)

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])

#: Suggested task polling interval, milliseconds.
DEFAULT_POLL_INTERVAL_MS = 500
#: Longest a plain (not task-augmented) ``tools/call`` waits for its outcome, seconds.
DEFAULT_CALL_WAIT_S = 600.0
#: Longest gap between two ``notifications/progress`` of a call that asked for them, seconds.
DEFAULT_PROGRESS_S = 5.0

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
    """The extension's task id on a store without a task index: the call's canonical identity,
    ``<run_id>:<tool_call_id>`` (on Redis, task ids are random and bound to the requester)."""
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
    """The extension's ``tasks/*``: ``-32021`` on a 2026-07-28 connection that does not
    declare it; ``-32601`` on a revision that has no ``tasks/*`` at all (before 2025-11-25)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise MCPError(tasks_2025.METHOD_NOT_FOUND, "Method not found")
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
        progress_s: the longest gap between two ``notifications/progress`` of a plain call
            whose request carries a ``progressToken``.
        task_support: each tool's ``execution.taskSupport`` on 2025-11-25 connections...
        tool_task_support: ...unless named here (tool name -> support).
        require_call_id: refuse calls whose ``_meta`` names no tool_call_id
            (``INVALID_TOOL_CALL_ID``) instead of minting one.
        oauth: requests carry a checked OAuth principal (HTTP with issuers): it decides the
            tools listed and callable, and the runs and tasks the requester sees.
    """

    def __init__(
        self,
        boundary: ToolBoundary,
        *,
        run_id: str | None = None,
        poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
        call_wait_s: float = DEFAULT_CALL_WAIT_S,
        progress_s: float = DEFAULT_PROGRESS_S,
        task_support: TaskSupport = "optional",
        tool_task_support: dict[str, TaskSupport] | None = None,
        require_call_id: bool = False,
        oauth: bool = False,
    ) -> None:
        self.calls = BoundaryCalls(boundary)
        if oauth and self.calls.owners is None:
            raise ConfigurationError("OAuth issuers need the Redis store (runs get owners)")
        self.oauth = oauth
        self.tasks = TaskIndex(boundary)
        self.registry = boundary.registry
        self.run_id = run_id
        self.poll_interval_ms = poll_interval_ms
        self.call_wait_s = call_wait_s
        self.progress_s = progress_s
        self.task_support: TaskSupport = task_support
        self.tool_task_support = dict(tool_task_support or {})
        self.require_call_id = require_call_id
        #: ``tasks/list`` is served (off where requesters cannot be told apart).
        self.list_tasks_enabled = True
        #: The auth context of requests with no HTTP request (stdio: one process, one session).
        self.session_owner = f"session-{uuid.uuid4().hex}"
        #: Status watchers of this process's tasks (kept so they are not collected).
        self._watchers: set[asyncio.Task[None]] = set()

    def support_of(self, tool_name: str) -> TaskSupport:
        """The tool's ``execution.taskSupport`` (``forbidden`` when this store has no task
        index)."""
        if not self.tasks.available:
            return "forbidden"
        return self.tool_task_support.get(tool_name, self.task_support)

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [
            tool_entry(spec)
            for spec in self.registry
            if spec.read_only and self._may_call(ctx, spec.name)
        ]
        if tasks_2025.speaks_2025_tasks(ctx):
            for tool in tools:
                tool.execution = types.ToolExecution(task_support=self.support_of(tool.name))
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        """Preflight, record and dispatch through the boundary; then a task (2025-11-25
        ``params.task``, or a request declaring the Tasks extension) or the outcome."""
        augmented = params.task is not None
        if not self._may_call(ctx, params.name):
            # First: a tool the token may not call is refused alike whether it exists or not,
            # and before any run is looked up or anything is stored (the preflight's code).
            return _refusal(augmented, ErrorCode.UNAUTHORIZED)
        if tasks_2025.speaks_2025_tasks(ctx):
            support = self.support_of(params.name)
            if augmented and support == "forbidden":
                raise tasks_2025.not_task_augmentable(
                    "Task augmentation is not supported for this tool"
                )
            if not augmented and support == "required":
                raise tasks_2025.task_required()
        elif augmented:
            raise tasks_2025.not_task_augmentable("Task augmentation needs a 2025-11-25 connection")
        meta: dict[str, Any] = dict(params.meta or {})
        run_id = meta.get(RUN_ID_META) or self.run_id
        if not isinstance(run_id, str):
            return _refusal(augmented, ErrorCode.RUN_NOT_FOUND)
        tool_call_id = meta.get(TOOL_CALL_ID_META)
        agent_id = tool_call_id is not None
        if tool_call_id is None:
            if self.require_call_id:
                return _refusal(augmented, ErrorCode.INVALID_TOOL_CALL_ID)
            # MCP has no call id of its own (a JSON-RPC request id repeats across reconnects):
            # mint one, use it as the canonical id, and return it.
            tool_call_id = f"{MINTED_PREFIX}{uuid.uuid4()}"
        run = await self.calls.get_run(run_id, tasks_2025.principal(ctx) if self.oauth else None)
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
            submission = await self.calls.submit(envelope, run)
        out_meta = ids_meta(run_id, tool_call_id) if isinstance(tool_call_id, str) else None
        if submission.outcome is not None:
            if augmented:
                raise tasks_2025.refused(submission.outcome.error_code, out_meta)
            return tool_result(submission.outcome, out_meta)
        assert submission.key is not None
        key = submission.key
        if augmented:
            assert params.task is not None
            return await self._create_task(ctx, key, params.task.ttl)
        if declares_tasks(ctx):
            state = await self._state(key)
            if state is not None:
                if not self.tasks.available:
                    return created_task(task_id_of(key), state, self.poll_interval_ms)
                entry = await self._add_entry(ctx, key, None, state)
                return created_task(entry.task_id, state, self.poll_interval_ms, **_fixed(entry))
        try:
            outcome = await self._wait_plain(ctx, key)
        except anyio.get_cancelled_exc_class():
            # The client cancelled the request or went away (closed session, stdio pipe): the
            # call is cancelled too, unless it carries the agent's own id (it can be asked
            # for again, so it outlives the connection).
            if not agent_id:
                with anyio.CancelScope(shield=True):
                    await self.calls.cancel(key)
            raise
        if outcome is None:
            # A plain call must end with an answer that stays true: the call is cancelled
            # (sealed CANCELLED unless it sealed first, in which case that outcome is answered).
            outcome = await self.calls.cancel(key)
        return tool_result(outcome, ids_meta(key.run_id, key.tool_call_id))

    def _may_call(self, ctx: ServerRequestContext[Any, Any], tool_name: str) -> bool:
        """Over an OAuth door, whether the request's token allows the tool; else always."""
        if not self.oauth:
            return True
        principal = tasks_2025.principal(ctx)
        return principal is not None and principal.may_call(tool_name)

    async def _wait_plain(
        self, ctx: ServerRequestContext[Any, Any], key: CanonicalKey
    ) -> ToolOutcome | None:
        """Waits for the outcome up to ``call_wait_s``; meanwhile, when the request carries a
        ``progressToken``, sends ``notifications/progress`` every ``progress_s / 2``: the
        tool's heartbeat fraction and message when it has them, a keep-alive otherwise."""
        raw_meta = (ctx.params or {}).get("_meta")
        wants_progress = isinstance(raw_meta, dict) and raw_meta.get("progressToken") is not None
        deadline = time.monotonic() + self.call_wait_s
        # Half the interval per wait: a notification's own latency never makes a gap reach it.
        slice_s = self.progress_s / 2
        ticks = 0
        last = 0.0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            waited = await self.calls.wait(key, min(slice_s, left))
            if not waited.pending:
                return waited
            if not wants_progress:
                continue
            ticks += 1
            fraction, message = progress_of(waited)
            if fraction is not None:
                # Progress must increase with each notification, even when the tool's
                # fraction has not moved since the last heartbeat.
                value = max(fraction, min(last + 1e-6, 1.0))
                await ctx.session.report_progress(value, 1.0, message)
            else:
                value = float(ticks)
                await ctx.session.report_progress(value, None, message)
            last = value

    async def _create_task(
        self, ctx: ServerRequestContext[Any, Any], key: CanonicalKey, ttl_ms: int | None
    ) -> dict[str, Any]:
        """A 2025-11-25 task for the accepted call: a random id bound to the requester."""
        state = await self._state(key)
        if state is None:
            raise _store_unavailable()
        entry = await self._add_entry(ctx, key, ttl_ms, state)
        if ctx.request is None:
            self._watch(ctx, entry)
        return tasks_2025.created(entry, state, self.poll_interval_ms)

    async def _add_entry(
        self,
        ctx: ServerRequestContext[Any, Any],
        key: CanonicalKey,
        ttl_ms: int | None,
        state: TaskState,
    ) -> TaskEntry:
        """A new random task id for the call, bound to the requester, in the task index."""
        owner = tasks_2025.requester(ctx, self.session_owner)
        entry = tasks_2025.new_entry(new_task_id(), key, owner, ttl_ms, state)
        try:
            await self.tasks.add(entry)
        except StoreError:
            raise _store_unavailable() from None
        return entry

    async def _key_of(
        self, ctx: ServerRequestContext[Any, Any], task_id: str
    ) -> TaskEntry | CanonicalKey:
        """The extension's task: its entry (random ids), or its key (a store with no task
        index: the id is the canonical identity)."""
        if not self.tasks.available:
            return _task_key(task_id)
        return await self._entry(ctx, task_id)

    def _watch(self, ctx: ServerRequestContext[Any, Any], entry: TaskEntry) -> None:
        """While this connection (stdio) lives: ``notifications/progress`` for the task when its
        request carried a ``progressToken`` (the spec: the token stays valid for the task's
        lifetime), as for a plain call; and ``notifications/tasks/status`` when it ends. The
        client must not rely on either, so a failure to send is dropped."""
        raw_meta = (ctx.params or {}).get("_meta")
        token = raw_meta.get("progressToken") if isinstance(raw_meta, dict) else None

        async def watch() -> None:
            try:
                ticks, last = 0, 0.0
                while True:
                    waited = await self.calls.wait(entry.key, self.progress_s / 2)
                    if not waited.pending:
                        break
                    if token is None:
                        continue
                    ticks += 1
                    fraction, message = progress_of(waited)
                    value = max(fraction, min(last + 1e-6, 1.0)) if fraction is not None else ticks
                    await ctx.session.send_progress_notification(
                        token, value, 1.0 if fraction is not None else None, message
                    )
                    last = float(value)
                state = await self.calls.task_state(entry.key)
                if state is None:
                    return
                task = tasks_2025.task_of(entry, state, self.poll_interval_ms)
                await ctx.session.send_notification(
                    tasks_2025.status_notification(task)  # type: ignore[arg-type]
                )
            except Exception as exc:
                logger.debug("task status not sent: %s", type(exc).__name__)

        watcher = asyncio.get_running_loop().create_task(watch())
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _entry(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskEntry:
        """The requester's task, else the spec's "not found" (another requester's task is not
        found either)."""
        try:
            entry = await self.tasks.get(task_id)
        except StoreError:
            raise _store_unavailable() from None
        if entry is None or entry.owner != tasks_2025.requester(ctx, self.session_owner):
            raise tasks_2025.task_not_found()
        return entry

    async def _task_2025(
        self, ctx: ServerRequestContext[Any, Any], task_id: str
    ) -> tuple[TaskEntry, TaskState]:
        entry = await self._entry(ctx, task_id)
        state = await self._state(entry.key)
        if state is None:
            raise tasks_2025.task_not_found()
        return entry, state

    async def _state(self, key: CanonicalKey) -> Any:
        try:
            return await self.calls.task_state(key)
        except StoreError:
            raise _store_unavailable() from None

    async def get_task(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> dict[str, Any]:
        if tasks_2025.speaks_2025_tasks(ctx):
            entry, state = await self._task_2025(ctx, params.task_id)
            return tasks_2025.task_of(entry, state, self.poll_interval_ms)
        _require_tasks(ctx)
        found = await self._key_of(ctx, params.task_id)
        key = found.key if isinstance(found, TaskEntry) else found
        state = await self._state(key)
        if state is None:
            raise _task_not_found()
        fixed = _fixed(found) if isinstance(found, TaskEntry) else {}
        return task_fields(params.task_id, state, self.poll_interval_ms, **fixed)

    async def update_task(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> dict[str, Any]:
        """Acknowledged for a known task; this server's tools never ask for input, so any
        responses are for no outstanding request and are ignored."""
        _require_tasks(ctx)
        found = await self._key_of(ctx, params.task_id)
        key = found.key if isinstance(found, TaskEntry) else found
        if await self._state(key) is None:
            raise _task_not_found()
        return {}

    async def cancel_task(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> dict[str, Any]:
        """Seals a working task's record ERROR ``CANCELLED`` (one atomic script) and revokes
        its queued work; a finished task stays as it is (2025-11-25: refused, ``-32602``)."""
        if tasks_2025.speaks_2025_tasks(ctx):
            return await self._cancel_2025(ctx, params.task_id)
        _require_tasks(ctx)
        found = await self._key_of(ctx, params.task_id)
        key = found.key if isinstance(found, TaskEntry) else found
        outcome = await self.calls.cancel(key)
        if outcome.error_code is ErrorCode.RECORD_NOT_FOUND:
            raise _task_not_found()
        if outcome.error_code is ErrorCode.STORE_UNAVAILABLE:
            raise _store_unavailable()
        return {}

    async def _cancel_2025(
        self, ctx: ServerRequestContext[Any, Any], task_id: str
    ) -> dict[str, Any]:
        entry, state = await self._task_2025(ctx, task_id)
        if state.outcome is not None:
            status, _ = tasks_2025.status_of(state.outcome, None)
            raise MCPError(
                INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{status}'"
            )
        outcome = await self.calls.cancel(entry.key)
        if outcome.error_code is ErrorCode.RECORD_NOT_FOUND:
            raise tasks_2025.task_not_found()
        if outcome.error_code is ErrorCode.STORE_UNAVAILABLE:
            raise _store_unavailable()
        entry, state = await self._task_2025(ctx, task_id)
        return tasks_2025.task_of(entry, state, self.poll_interval_ms)

    async def task_result(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> dict[str, Any]:
        """``tasks/result`` (2025-11-25): waits until the task is terminal (woken by the seal),
        then answers what the call answers, with the related-task ``_meta``."""
        _require_2025(ctx)
        entry = await self._entry(ctx, params.task_id)
        while True:
            outcome = await self.calls.outcome(entry.key, tasks_2025.RESULT_WAIT_S)
            if outcome is not None and outcome.error_code is ErrorCode.RECORD_NOT_FOUND:
                raise tasks_2025.task_not_found()  # the record expired under the task
            if outcome is not None:
                return tasks_2025.final_result(entry, outcome)
            # Still running: the task must still exist to be waited on.
            await self._entry(ctx, params.task_id)

    async def list_tasks(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> dict[str, Any]:
        """``tasks/list`` (2025-11-25): the requester's tasks, newest first, a page at a time
        from its index (never a SCAN); the cursor is opaque to the client."""
        _require_2025(ctx)
        if not self.list_tasks_enabled:
            raise MCPError(tasks_2025.METHOD_NOT_FOUND, "Method not found")
        owner = tasks_2025.requester(ctx, self.session_owner)
        after = _decode_cursor(params.cursor if params is not None else None)
        try:
            entries, following = await self.tasks.page(owner, after, tasks_2025.LIST_PAGE_SIZE)
            tasks: list[dict[str, Any]] = []
            for entry in entries:
                state = await self.calls.task_state(entry.key)
                if state is not None:
                    tasks.append(tasks_2025.task_of(entry, state, self.poll_interval_ms))
        except StoreError:
            raise _store_unavailable() from None
        result: dict[str, Any] = {"tasks": tasks}
        if following is not None:
            result["nextCursor"] = _encode_cursor(following)
        return result


def _refusal(augmented: bool, code: ErrorCode) -> types.CallToolResult:
    """A call refused before it had an outcome of its own: its ``isError`` result, or for a
    task-augmented call (no task was created) the spec's protocol error."""
    if augmented:
        raise tasks_2025.refused(code, None)
    return error_result(code)


def progress_of(outcome: ToolOutcome) -> tuple[float | None, str | None]:
    """A PROJECTING outcome's heartbeat fraction and message (``ToolOutcome.progress``, from
    the tool's ``heartbeat()``), when it has them."""
    progress = outcome.progress
    if progress is None:
        return None, None
    return progress.fraction, progress.message or None


def _fixed(entry: TaskEntry) -> dict[str, Any]:
    """A task's TTL and creation as its entry fixed them (stable between reads)."""
    return {
        "fixed_ttl_ms": entry.ttl_ms,
        "created_at": datetime.fromtimestamp(entry.created_ms / 1000, tz=UTC),
    }


def _encode_cursor(member: str) -> str:
    return base64.urlsafe_b64encode(member.encode()).decode()


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


def _require_2025(ctx: ServerRequestContext[Any, Any]) -> None:
    """``tasks/result`` and ``tasks/list`` exist on 2025-11-25 connections only."""
    if not tasks_2025.speaks_2025_tasks(ctx):
        raise MCPError(tasks_2025.METHOD_NOT_FOUND, "Method not found")


#: Where a 2025-11-25 task-augmented ``tools/call`` is routed: a method of this server's own,
#: so its ``CreateTaskResult`` is not sieved as a ``CallToolResult`` (the SDK's 2025-11-25
#: surface knows no other ``tools/call`` result).
TASK_CALL_METHOD = "tool-boundary/tools-call-task"


#: The HTTP header SEP-2663 mirrors a task request's ``taskId`` into, for routing.
NAME_HEADER = "mcp-name"


async def route_task_calls(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
    """Server middleware: a ``tools/call`` with ``params.task`` on a 2025-11-25 connection
    goes to ``TASK_CALL_METHOD`` (same handler, same init gate and params validation); a
    ``tasks/*`` request over HTTP whose ``Mcp-Name`` header names another task than its
    ``taskId`` is refused (``-32602``), so a router and this server never disagree."""
    params = ctx.params
    if ctx.method.startswith("tasks/") and params is not None and "taskId" in params:
        headers = getattr(ctx.request, "headers", None)
        name = headers.get(NAME_HEADER) if headers is not None else None
        if name is not None and name != params.get("taskId"):
            raise MCPError(INVALID_PARAMS, "Mcp-Name header does not match the task id")
    if (
        ctx.method == "tools/call"
        and tasks_2025.speaks_2025_tasks(ctx)
        and params is not None
        and params.get("task") is not None
    ):
        return await call_next(dataclasses.replace(ctx, method=TASK_CALL_METHOD))
    return await call_next(ctx)


class BoundaryServer(Server[Any]):
    """The SDK server, announcing ``capabilities.tasks`` on handshake (2025-11-25)
    connections; 2026-07-28 connections get the Tasks extension instead."""

    tasks_capability: types.ServerTasksCapability | None = None

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        if kwargs.get("protocol_version") in MODERN_PROTOCOL_VERSIONS:
            return capabilities
        return capabilities.model_copy(update={"tasks": self.tasks_capability})


def build_server(
    boundary: ToolBoundary,
    *,
    run_id: str | None = None,
    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
    call_wait_s: float = DEFAULT_CALL_WAIT_S,
    progress_s: float = DEFAULT_PROGRESS_S,
    task_support: TaskSupport = "optional",
    tool_task_support: dict[str, TaskSupport] | None = None,
    require_call_id: bool = False,
    list_tasks: bool = True,
    oauth: bool = False,
    name: str = "tool-boundary",
) -> Server[Any]:
    """A low-level SDK server serving the boundary's registry, with 2025-11-25 Tasks and the
    Tasks extension. ``list_tasks=False`` leaves ``tasks/list`` out of the capabilities (a
    server that cannot tell requesters apart: HTTP without a token). ``oauth=True``: every
    request carries a checked OAuth principal (``tasks.mcp_server.oauth``)."""
    handlers = BoundaryMCP(
        boundary,
        run_id=run_id,
        poll_interval_ms=poll_interval_ms,
        call_wait_s=call_wait_s,
        progress_s=progress_s,
        task_support=task_support,
        tool_task_support=tool_task_support,
        require_call_id=require_call_id,
        oauth=oauth,
    )
    server = BoundaryServer(name, version="0.1.0", on_list_tools=_guarded(handlers.list_tools))
    handlers.list_tasks_enabled = list_tasks
    if handlers.tasks.available:
        server.tasks_capability = tasks_2025.server_capability(list_tasks=list_tasks)
    server.add_request_handler(
        "tools/call", types.CallToolRequestParams, _guarded(handlers.call_tool)
    )
    server.add_request_handler(
        TASK_CALL_METHOD, types.CallToolRequestParams, _guarded(handlers.call_tool)
    )
    server.middleware.append(route_task_calls)
    server.add_request_handler("tasks/get", TaskParams, _guarded(handlers.get_task))
    server.add_request_handler("tasks/update", UpdateTaskParams, _guarded(handlers.update_task))
    server.add_request_handler("tasks/cancel", TaskParams, _guarded(handlers.cancel_task))
    server.add_request_handler("tasks/result", TaskParams, _guarded(handlers.task_result))
    server.add_request_handler(
        "tasks/list", types.PaginatedRequestParams, _guarded(handlers.list_tasks)
    )
    server.extensions[TASKS_EXTENSION] = {}
    return server
