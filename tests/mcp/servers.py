"""Real ``tool-boundary mcp`` server processes for the MCP tests, and clients for them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tasks.mcp_server.client import TasksExtension
from tests.celery.workers import ROOT, settings_env
from tests.conftest import celery_test_settings

#: How often servers under test suggest polling a task, milliseconds.
TEST_POLL_INTERVAL_MS = 100


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a server under test: the Celery tests' settings (store, broker and
    backend DBs; the test tools), and a short poll interval."""
    env = settings_env(celery_test_settings())
    env["TOOL_BOUNDARY_MCP_POLL_INTERVAL_MS"] = str(TEST_POLL_INTERVAL_MS)
    env.pop("TOOL_BOUNDARY_MCP_TOKEN", None)
    env.update(extra)
    return env


def server_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tasks.cli", "mcp", *args]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class HttpServer:
    """One ``tool-boundary mcp --transport http`` process; ``restart`` keeps its port."""

    port: int
    log: Path
    env: dict[str, str]
    args: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout_s: float = 30.0) -> float:
        """Starts the process and returns the seconds until it accepts connections."""
        started = time.monotonic()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                server_command("--transport", "http", "--port", str(self.port), *self.args),
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"MCP server exited:\n{self.log.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return time.monotonic() - started
            except OSError:
                if time.monotonic() - started > timeout_s:
                    tail = self.log.read_text()[-3000:]
                    raise RuntimeError(f"MCP server did not start:\n{tail}") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: nothing of the process survives, no shutdown runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> float:
        self.kill()
        return self.start()


@contextmanager
def http_server(log: Path, *args: str, **env: str) -> Iterator[HttpServer]:
    server = HttpServer(port=free_port(), log=log, env=server_env(**env), args=args)
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
async def stdio_client(*args: str, tasks: bool = False) -> AsyncIterator[Client]:
    """The SDK's client, launching ``tool-boundary mcp --transport stdio`` itself."""
    command = server_command("--transport", "stdio", *args)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=server_env(), cwd=str(ROOT)
    )
    extensions = [TasksExtension()] if tasks else None
    async with Client(params, extensions=extensions) as client:
        yield client
