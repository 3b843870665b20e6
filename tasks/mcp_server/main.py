"""Starts ``tool-boundary mcp``: a boundary over the Celery workers, served on stdio or HTTP."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Literal

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from boundary import ConfigurationError, ToolBoundary
from tasks.mcp_server.http import MCP_PATH, run_http
from tasks.mcp_server.options import ServerOptions
from tasks.mcp_server.server import build_server
from tasks.mcp_server.settings import MCPSettings
from tasks.mcp_server.wire import ServedVersionsWriter
from tasks.runtime import get_runtime
from tasks.settings import is_loopback
from tasks.wiring.dispatcher import CeleryDispatcher

if TYPE_CHECKING:
    from tasks.mcp_server.oauth.config import OAuthConfig

logger = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]


def check_binding(host: str, settings: MCPSettings) -> str | None:
    """The bearer token to require, or ``None`` on loopback without one or with OAuth issuers
    (their tokens are checked instead, on any address).

    Raises:
        ConfigurationError: binding off loopback with neither a token nor issuers.
    """
    token = settings.token.get_secret_value() if settings.token is not None else None
    if not token and not settings.oauth and not is_loopback(host):
        raise ConfigurationError(
            f"binding {host} needs TOOL_BOUNDARY_MCP_TOKEN (a bearer token clients must send) "
            "or TOOL_BOUNDARY_MCP_AUTH_ISSUERS (OAuth access tokens)"
        )
    return token or None


def make_server(options: ServerOptions) -> tuple[ToolBoundary, Server[object]]:
    from tasks.wiring.app import app

    boundary = get_runtime().boundary(CeleryDispatcher(app))
    return boundary, build_server(boundary, options)


async def _serve_stdio(server: Server[object], boundary: ToolBoundary) -> None:
    try:
        async with stdio_server() as (read_stream, write_stream):
            writer = ServedVersionsWriter(write_stream)
            await server.run(read_stream, writer, server.create_initialization_options())
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
    # stdio takes its credentials from the environment (the MCP authorization profile): no
    # token and no issuer applies to it.
    oauth = _oauth_config(settings) if transport == "http" and settings.oauth else None
    token = check_binding(host, settings) if transport == "http" and oauth is None else None
    # Over HTTP without a token requesters cannot be told apart: no tasks/list (the spec).
    list_tasks = transport == "stdio" or token is not None or oauth is not None
    options = ServerOptions.of(
        settings, run_id=run_id, list_tasks=list_tasks, oauth=oauth is not None
    )
    boundary, server = make_server(options)
    if transport == "stdio":
        anyio.run(_serve_stdio, server, boundary)
        return
    if oauth is not None:
        tools = tuple(spec.name for spec in boundary.registry if spec.read_only)
        oauth = dataclasses.replace(oauth, tool_names=tools)
    logger.warning("tool-boundary mcp listening on http://%s:%d%s", host, port, MCP_PATH)
    run_http(server, host=host, port=port, token=token, oauth=oauth)


def _oauth_config(settings: MCPSettings) -> OAuthConfig:
    """The checked OAuth configuration (PyJWT and ``cryptography`` imported only here).

    Raises:
        ConfigurationError: bad OAuth settings, or the ``mcp-auth`` extra missing.
    """
    try:
        from tasks.mcp_server.oauth.config import oauth_config
    except ImportError:
        raise ConfigurationError(
            "OAuth issuers need the mcp-auth extra: pip install 'tool-boundary[mcp-auth]'"
        ) from None
    return oauth_config(settings)
