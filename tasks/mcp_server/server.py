"""The MCP server over a ``ToolBoundary``: ``tools/list``, ``tools/call``, the 2025-11-25
Tasks and the Tasks extension (``tasks/get``, ``tasks/update``, ``tasks/cancel``), answered from
the canonical record, so any server process answers for any task, across restarts.

The SDK (``mcp`` 2.x) carries extension methods and a ``resultType: "task"`` result but keeps no
tasks itself; the handlers (``handlers``) follow the published schemas, one object per
protocol revision (``revision``, ``revision_2025``, ``revision_2026``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from boundary import ToolBoundary
from tasks.mcp_server import tasks_2025
from tasks.mcp_server.errors import INVALID_PARAMS, guarded
from tasks.mcp_server.handlers import BoundaryMCP, Revisions, TaskParams, UpdateTaskParams
from tasks.mcp_server.options import ServerOptions
from tasks.mcp_server.results import TASKS_EXTENSION
from tasks.mcp_server.wire import discover_handler

#: Where a 2025-11-25 task-augmented ``tools/call`` is routed: a method of this server's own,
#: so its ``CreateTaskResult`` is not sieved as a ``CallToolResult`` (the SDK's 2025-11-25
#: surface knows no other ``tools/call`` result).
TASK_CALL_METHOD = "tool-boundary/tools-call-task"

#: The HTTP header SEP-2663 mirrors a task request's ``taskId`` into, for routing.
NAME_HEADER = "mcp-name"


def task_call_router(revisions: Revisions) -> Any:
    """Server middleware: a ``tools/call`` its revision routes apart (2025-11-25 with
    ``params.task``) goes to ``TASK_CALL_METHOD`` (same handler, same init gate and params
    validation); a ``tasks/*`` request over HTTP whose ``Mcp-Name`` header names another task
    than its ``taskId`` is refused (``-32602``), so a router and this server never disagree."""

    async def route_task_calls(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        params = ctx.params
        if ctx.method.startswith("tasks/") and params is not None and "taskId" in params:
            headers = getattr(ctx.request, "headers", None)
            name = headers.get(NAME_HEADER) if headers is not None else None
            if name is not None and name != params.get("taskId"):
                raise MCPError(INVALID_PARAMS, "Mcp-Name header does not match the task id")
        if ctx.method == "tools/call" and revisions.of(ctx).routes_task_call(params):
            return await call_next(dataclasses.replace(ctx, method=TASK_CALL_METHOD))
        return await call_next(ctx)

    return route_task_calls


class BoundaryServer(Server[Any]):
    """The SDK server, announcing ``capabilities.tasks`` where the handshake's revision has
    them (2025-11-25); 2026-07-28 connections get the Tasks extension instead."""

    tasks_capability: types.ServerTasksCapability | None = None
    revisions: Revisions | None = None

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        if capabilities.tools is not None and capabilities.tools.list_changed:
            # The SDK infers it from subscriptions/listen being served; the registry never
            # changes while the server runs, and a listen stream carries task status only.
            tools = capabilities.tools.model_copy(update={"list_changed": False})
            capabilities = capabilities.model_copy(update={"tools": tools})
        revisions, version = self.revisions, kwargs.get("protocol_version")
        if revisions is not None and not revisions.of_version(version).announces_tasks:
            return capabilities
        return capabilities.model_copy(update={"tasks": self.tasks_capability})


def build_server(
    boundary: ToolBoundary, options: ServerOptions | None = None, *, name: str = "tool-boundary"
) -> Server[Any]:
    """A low-level SDK server serving the boundary's registry, with 2025-11-25 Tasks and the
    Tasks extension, configured by ``options`` (``ServerOptions``; its defaults without).
    ``list_tasks=False`` leaves ``tasks/list`` out of the capabilities (a server that cannot
    tell requesters apart: HTTP without a token). ``oauth=True``: every request carries a
    checked OAuth principal (``tasks.mcp_server.oauth``)."""
    options = options or ServerOptions()
    handlers = BoundaryMCP(boundary, options)
    server = BoundaryServer(name, version="0.1.0", on_list_tools=guarded(handlers.list_tools))
    server.revisions = handlers.revisions
    if handlers.core.tasks.available:
        server.tasks_capability = tasks_2025.server_capability(list_tasks=options.list_tasks)
    call_tool = guarded(handlers.call_tool)
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    server.add_request_handler(TASK_CALL_METHOD, types.CallToolRequestParams, call_tool)
    server.middleware.append(task_call_router(handlers.revisions))
    server.add_request_handler("tasks/get", TaskParams, guarded(handlers.get_task))
    server.add_request_handler("tasks/update", UpdateTaskParams, guarded(handlers.update_task))
    server.add_request_handler("tasks/cancel", TaskParams, guarded(handlers.cancel_task))
    server.add_request_handler("tasks/result", TaskParams, guarded(handlers.task_result))
    server.add_request_handler(
        "tasks/list", types.PaginatedRequestParams, guarded(handlers.list_tasks)
    )
    server.add_request_handler(
        "subscriptions/listen", types.SubscriptionsListenRequestParams, guarded(handlers.listen)
    )
    server.add_request_handler("server/discover", types.RequestParams, discover_handler(server))
    server.extensions[TASKS_EXTENSION] = {}
    return server
