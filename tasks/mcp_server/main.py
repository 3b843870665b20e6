"""Starts ``tool-boundary mcp``: a boundary over the Celery workers, served on stdio or HTTP."""

from __future__ import annotations

import logging
from typing import Literal

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from boundary import ConfigurationError, ToolBoundary
from tasks.dispatcher import CeleryDispatcher
from tasks.mcp_server.http import MCP_PATH, run_http
from tasks.mcp_server.server import build_server
from tasks.mcp_server.settings import MCPSettings, is_loopback
from tasks.runtime import get_runtime

logger = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]


def check_binding(host: str, settings: MCPSettings) -> str | None:
    """The bearer token to require, or ``None`` on loopback without one.

    Raises:
        ConfigurationError: binding off loopback without a token.
    """
    token = settings.token.get_secret_value() if settings.token is not None else None
    if not token and not is_loopback(host):
        raise ConfigurationError(
            f"binding {host} needs TOOL_BOUNDARY_MCP_TOKEN (a bearer token clients must send)"
        )
    return token or None


def make_server(
    run_id: str | None, settings: MCPSettings, *, list_tasks: bool = True
) -> tuple[ToolBoundary, Server[object]]:
    from tasks.app import app

    boundary = get_runtime().boundary(CeleryDispatcher(app))
    return boundary, build_server(
        boundary,
        run_id=run_id,
        poll_interval_ms=settings.poll_interval_ms,
        call_wait_s=settings.call_wait_s,
        progress_s=settings.progress_s,
        task_support=settings.task_support,
        tool_task_support=settings.tool_task_support,
        require_call_id=settings.require_call_id,
        list_tasks=list_tasks,
    )


async def _serve_stdio(server: Server[object], boundary: ToolBoundary) -> None:
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await boundary.aclose()


def serve(
    transport: Transport,
    *,
    host: str,
    port: int,
    run_id: str | None,
    require_call_id: bool = False,
) -> None:
    """Runs the server until its input ends (stdio) or it is stopped (HTTP).

    Raises:
        ConfigurationError: bad settings, an off-loopback bind without a token, or a registry
            that cannot be loaded.
    """
    settings = MCPSettings()
    if require_call_id:
        settings.require_call_id = True
    token = check_binding(host, settings) if transport == "http" else None
    # Over HTTP without a token requesters cannot be told apart: no tasks/list (the spec).
    list_tasks = transport == "stdio" or token is not None
    boundary, server = make_server(run_id, settings, list_tasks=list_tasks)
    if transport == "stdio":
        anyio.run(_serve_stdio, server, boundary)
        return
    logger.warning("tool-boundary mcp listening on http://%s:%d%s", host, port, MCP_PATH)
    run_http(server, host=host, port=port, token=token)
