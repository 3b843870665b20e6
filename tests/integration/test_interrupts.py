"""Ctrl-C in the long-running commands, as a user presses it: a real subprocess, SIGINT once a
line or a message proves the command is mid-way, then one line ``interrupted`` and exit 130.

(The demo's case is in ``test_process_failures.py``.) Each command here waits on something
that never comes (a store that does not answer, a result no worker computes, an MCP client's
next request), so "finished normally" is not a possible outcome.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from boundary import (
    InProcessDispatcher,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks.exits import EXIT_INTERRUPTED
from tasks.wiring.app import PROJECT_RUNS, PROJECTIONS_QUEUE
from tests.celery.workers import ROOT, settings_env
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, redis_url
from tests.integration.test_process_failures import PROCESS_TIMEOUT_S, clean_env
from tests.support.celery_tools import registry

COMMAND = str(Path(sys.executable).with_name("tool-boundary"))


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [COMMAND, *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def interrupt(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Ctrl-C, then what the process printed; it is killed if it does not end."""
    try:
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def assert_interrupted(proc: subprocess.Popen[str], stdout: str, stderr: str) -> None:
    assert proc.returncode == EXIT_INTERRUPTED, stderr[-3000:]
    assert stderr.strip() == "interrupted", stderr[-3000:]
    assert "Traceback" not in stdout + stderr


@pytest.fixture
def silent_store() -> Iterator[socket.socket]:
    """A TCP port that accepts a connection and never answers (a store that hangs)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(PROCESS_TIMEOUT_S)
    try:
        yield listener
    finally:
        listener.close()


@pytest.mark.parametrize(
    "args", [["runs"], ["observe", "run-1"], ["show", "run-1", "call-1"]], ids=" ".join
)
def test_ctrl_c_while_a_read_waits_on_the_store_is_one_line_and_130(
    args: list[str], silent_store: socket.socket
) -> None:
    # Given a read command whose store accepts its connection and never answers (no socket
    # timeout of its own before the test's)
    port = silent_store.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0?socket_timeout={PROCESS_TIMEOUT_S}"
    proc = start(clean_env(TOOL_BOUNDARY_REDIS_URL=url), *args)
    connection, _ = silent_store.accept()
    try:
        # When its first command has arrived (it now waits for the reply) and Ctrl-C comes
        assert connection.recv(1024)
        stdout, stderr = interrupt(proc)
    finally:
        connection.close()

    # Then one line, exit 130
    assert_interrupted(proc, stdout, stderr)


def test_ctrl_c_while_reproject_waits_for_its_results_is_one_line_and_130(
    redis_client: redis.Redis,
) -> None:
    # Given a live run, and reproject sending it to a broker no worker consumes
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    local = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry, inline=True)
    )
    run = RunContext(run_id="run-int", authorized_tools=frozenset({"lookup"}))
    call = ToolCallEnvelope(
        run_id="run-int", tool_call_id="c1", tool_name="lookup", arguments={"query": "x"}
    )
    assert local.invoke(call, run).error_code is None
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))
    broker = redis.Redis.from_url(settings.broker)
    broker.delete(PROJECTIONS_QUEUE)
    env = clean_env() | settings_env(settings)
    proc = start(env, "reproject", "--run", "run-int", "--timeout", str(10 * PROCESS_TIMEOUT_S))
    try:
        # When its task is in the queue (reproject now waits for the result) and Ctrl-C comes
        queued = None
        for _ in range(PROCESS_TIMEOUT_S):  # one-second waits: below the client's own timeout
            queued = broker.blpop([PROJECTIONS_QUEUE], timeout=1)
            if queued is not None or proc.poll() is not None:
                break
        assert queued is not None, proc.stderr.read() if proc.poll() is not None else ""
        assert json.loads(queued[1])["headers"]["task"] == PROJECT_RUNS
        stdout, stderr = interrupt(proc)
    finally:
        broker.delete(PROJECTIONS_QUEUE, f"_kombu.binding.{PROJECTIONS_QUEUE}")
        broker.close()

    # Then one line, exit 130, and no JSON line for a run that was not reprocessed
    assert_interrupted(proc, stdout, stderr)
    assert stdout == ""


def test_ctrl_c_in_the_mcp_stdio_server_is_one_line_and_130(redis_client: redis.Redis) -> None:
    pytest.importorskip("mcp")
    # Given the stdio MCP server, which has answered an initialize request
    settings = celery_test_settings(tools="tasks.demo.tools:registry")
    proc = start(clean_env() | settings_env(settings), "mcp", "--transport", "stdio")
    assert proc.stdin is not None and proc.stdout is not None
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1

    # When Ctrl-C comes while it waits for the next request
    stdout, stderr = interrupt(proc)

    # Then one line, exit 130
    assert_interrupted(proc, stdout, stderr)
