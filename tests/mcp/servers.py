"""Real ``tool-boundary mcp`` server processes for the MCP tests, and clients for them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench.rig.mcp_server import ROOT, HttpServer, server_command
from tasks.mcp_server.client import TasksExtension
from tests.celery.workers import settings_env
from tests.conftest import celery_test_settings
from tests.support.servers import free_port, release_port

#: How often servers under test suggest polling a task, milliseconds.
TEST_POLL_INTERVAL_MS = 100


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a server under test: the Celery tests' settings (store, broker and
    backend DBs; the test tools), a short poll interval and progress every 0.1 s."""
    env = settings_env(celery_test_settings())
    # None of the caller's own MCP settings (a token, issuers) reaches a server under test.
    for name in [name for name in env if name.startswith("TOOL_BOUNDARY_MCP_")]:
        del env[name]
    env["TOOL_BOUNDARY_MCP_POLL_INTERVAL_MS"] = str(TEST_POLL_INTERVAL_MS)
    env["TOOL_BOUNDARY_MCP_PROGRESS_S"] = "0.2"
    env.update(extra)
    return env


@contextmanager
def http_server(log: Path, *args: str, **env: str) -> Iterator[HttpServer]:
    """A server on a port of the test range (``TB_TEST_SERVER_PORTS``)."""
    port = free_port()
    server = HttpServer(port=port, log=log, env=server_env(**env), args=args)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        release_port(port)


@contextmanager
def oauth_server(
    log: Path, issuers: dict[str, str], *args: str, **env: str
) -> Iterator[HttpServer]:
    """A server that takes OAuth access tokens from ``issuers`` (issuer -> JWKS URI), its
    canonical URI its own ``/mcp`` URL."""
    port = free_port()
    settings = {
        "TOOL_BOUNDARY_MCP_RESOURCE": f"http://127.0.0.1:{port}/mcp",
        "TOOL_BOUNDARY_MCP_AUTH_ISSUERS": json.dumps(issuers),
        **env,
    }
    server = HttpServer(port=port, log=log, env=server_env(**settings), args=args)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        release_port(port)


@asynccontextmanager
async def http_client(
    url: str, *, token: str | None = None, tasks: bool = False, **options: Any
) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP (a bearer token when given)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(url, http_client=http)
        extensions = [TasksExtension()] if tasks else None
        async with Client(transport, extensions=extensions, **options) as client:
            yield client


@asynccontextmanager
async def stdio_client(*args: str, tasks: bool = False, **env: str) -> AsyncIterator[Client]:
    """The SDK's client, launching ``tool-boundary mcp --transport stdio`` itself."""
    command = server_command("--transport", "stdio", *args)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=server_env(**env), cwd=str(ROOT)
    )
    extensions = [TasksExtension()] if tasks else None
    async with Client(params, extensions=extensions) as client:
        yield client
