"""HTTP binds loopback by default; a bearer token, when set, guards every request (and is
required to bind anywhere else); the token never appears in the server's output."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from tests.celery.workers import ROOT
from tests.mcp.servers import HttpServer, http_client, http_server, server_command, server_env

TOKEN = "tb-test-token-5f2c9e1d"


@pytest.fixture(scope="module")
def guarded(logs: Path) -> Iterator[HttpServer]:
    with http_server(logs / "guarded.log", TOOL_BOUNDARY_MCP_TOKEN=TOKEN) as server:
        yield server


def post(url: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    with httpx2.Client(timeout=30) as client:
        return client.post(
            url,
            json=body,
            headers={"Accept": "application/json, text/event-stream", **(headers or {})},
        )


def test_requests_without_the_token_get_401(guarded: HttpServer) -> None:
    # When requests come without a token, or with a wrong one
    missing = post(guarded.url)
    wrong = post(guarded.url, {"Authorization": "Bearer not-the-token"})
    # Then both are refused before reaching MCP, and the answer does not echo anything
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert TOKEN not in wrong.text and "not-the-token" not in wrong.text


def test_the_sdk_client_with_the_token_is_served(guarded: HttpServer, opened_run: Any) -> None:
    async def scenario() -> Any:
        async with http_client(guarded.url, token=TOKEN) as client:
            return await client.list_tools()

    assert any(tool.name == "lookup" for tool in anyio.run(scenario).tools)


def test_the_sdk_client_without_the_token_fails(guarded: HttpServer) -> None:
    async def scenario() -> None:
        async with http_client(guarded.url) as client:
            await client.list_tools()

    with pytest.raises((MCPError, httpx2.HTTPError, ExceptionGroup, RuntimeError)):
        anyio.run(scenario)


def test_the_token_never_appears_in_the_server_output(guarded: HttpServer, opened_run: Any) -> None:
    # Given served and refused requests
    post(guarded.url)
    post(guarded.url, {"Authorization": f"Bearer {TOKEN}x"})
    post(guarded.url, {"Authorization": f"Bearer {TOKEN}"})
    # Then the server's whole output never holds the token
    assert TOKEN not in guarded.log.read_text(errors="replace")


def test_binding_off_loopback_without_a_token_is_refused() -> None:
    # When the server is asked to bind every interface without a token
    done = subprocess.run(
        server_command("--transport", "http", "--host", "0.0.0.0", "--port", "1"),
        check=False,
        cwd=ROOT,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then it exits with the usage code and one line that says what to set
    assert done.returncode == 2
    assert "TOOL_BOUNDARY_MCP_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr
