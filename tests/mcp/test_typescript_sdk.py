"""The TypeScript MCP SDK (``@modelcontextprotocol/sdk`` 1.32.2, the most used MCP client
library, protocol 2025-11-25) against ``tool-boundary mcp --transport stdio`` and a real worker:
a plain call kept alive by progress past the client's timeout, a task-augmented call through the
SDK's own task stream, and an aborted call cancelled; over HTTP with OAuth, a call with a bearer
token, and without one the 401 challenge followed to the metadata and the issuer.

Needs node and npm: the SDK is installed by ``npm install`` in a temporary directory (skipped
without them, or when the registry cannot be reached; failed when ``CI`` is set)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis

from bench.rig.mcp_server import ROOT, server_command
from boundary import ErrorCode, RedisCanonicalStore, RunContext
from tests.mcp.conftest import RUN_ID
from tests.mcp.issuer import serving_issuer
from tests.mcp.records import minted_key, sealed
from tests.mcp.servers import HttpServer, oauth_server, server_env

HERE = Path(__file__).parent / "ts"

#: One xdist worker runs them all: the SDK's ``npm install`` (module-scoped) is done once.
pytestmark = pytest.mark.xdist_group("typescript")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the SDK installed and ``client.mjs``."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("node and npm are needed for the TypeScript SDK client")
    directory = tmp_path_factory.mktemp("ts-client")
    for name in ("package.json", "client.mjs"):
        shutil.copy(HERE / name, directory / name)
    try:
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=directory,
            check=True,
            capture_output=True,
            timeout=300,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        _unavailable("npm install of @modelcontextprotocol/sdk failed")
    return directory


def run_client(directory: Path, scenario: str, **options: Any) -> dict[str, Any]:
    """Runs one scenario of ``client.mjs`` (it starts the server itself) and returns what it
    saw."""
    env = server_env(TOOL_BOUNDARY_MCP_PROGRESS_S="0.2", PYTHONPATH=str(ROOT))
    env["TB_MCP_COMMAND"] = json.dumps(server_command("--transport", "stdio"))
    done = subprocess.run(
        ["node", "client.mjs", scenario, json.dumps({"run": RUN_ID, **options})],
        cwd=directory,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    seen: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return seen


def test_a_plain_call_outlives_the_clients_timeout_on_progress(
    ts_client: Path, opened_run: RunContext
) -> None:
    # When a 4 s tool is called with a 2 s client timeout that progress resets
    seen = run_client(
        ts_client,
        "plain",
        tool="sleepy",
        arguments={"seconds": 4.0},
        callId="call-ts-plain",
        timeoutMs=2000,
    )
    # Then the call answered its outcome, kept alive by the server's progress
    assert "error" not in seen, seen
    assert seen["isError"] is False and seen["structured"]["status"] == "READY"
    assert seen["progress"] > 0


def test_a_task_augmented_call_through_the_sdks_task_stream(
    ts_client: Path, opened_run: RunContext
) -> None:
    seen = run_client(
        ts_client,
        "task",
        tool="sleepy",
        arguments={"seconds": 0.5},
        callId="call-ts-task",
        ttl=60000,
    )
    assert seen["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
    assert set(seen["taskSupport"].values()) == {"optional"}
    assert seen["messages"][0] == "taskCreated" and seen["messages"][-1] == "result", seen
    assert seen["created"]["ttl"] == 60000
    assert seen["result"]["isError"] is False
    assert seen["task"]["status"] == "completed"
    assert seen["listed"] == [seen["taskId"]]


def test_an_aborted_plain_call_is_cancelled(
    ts_client: Path,
    opened_run: RunContext,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # When the client aborts a plain call (its id minted by the server) while it runs
    seen = run_client(
        ts_client, "abort", tool="sleepy", arguments={"seconds": 4.0}, abortAfterMs=1500
    )
    assert seen["aborted"] is True
    # Then the call is sealed CANCELLED
    record = sealed(store, minted_key(redis_client))
    assert record.error_code is ErrorCode.CANCELLED


def test_over_http_a_plain_call_is_kept_alive_and_a_task_runs(
    ts_client: Path, opened_run: RunContext, server_a: HttpServer
) -> None:
    # When the same SDK talks streamable HTTP to a running server
    plain = run_client(
        ts_client,
        "plain",
        url=server_a.url,
        tool="sleepy",
        arguments={"seconds": 4.0},
        callId="call-ts-http-plain",
        timeoutMs=2000,
    )
    task = run_client(
        ts_client,
        "task",
        url=server_a.url,
        tool="lookup",
        arguments={"query": "x"},
        callId="call-ts-http-task",
        ttl=60000,
    )
    # Then progress on the request's event stream kept the plain call alive past its timeout
    assert "error" not in plain, plain
    assert plain["isError"] is False and plain["progress"] > 0
    # And the task ran to its result (over HTTP without a token, no tasks/list is offered)
    assert task["messages"][0] == "taskCreated" and task["messages"][-1] == "result", task
    assert task["result"]["isError"] is False


def test_over_http_with_oauth_a_token_calls_and_no_token_follows_the_challenge(
    ts_client: Path, opened_run: RunContext, logs: Path
) -> None:
    with (
        serving_issuer() as issuer,
        oauth_server(logs / "ts-oauth.log", {issuer.url: issuer.jwks_uri}) as server,
    ):
        # When the SDK connects with a bearer token allowed one tool, and calls it
        token = issuer.token(server.url, scope="tools:call:lookup")
        called = run_client(
            ts_client,
            "call",
            url=server.url,
            token=token,
            tool="lookup",
            arguments={"query": "x"},
            callId="call-ts-oauth",
        )
        # And connects without a token, as an OAuth client that has none yet
        challenged = run_client(ts_client, "challenge", url=server.url)
    # Then the token's tool is the one listed, and its call answered READY
    assert called["tools"] == ["lookup"]
    assert called["isError"] is False and called["structured"]["status"] == "READY"
    # And without a token the SDK read the 401 challenge, fetched the metadata it points to,
    # and would send the user to the issuer it names, asking for this resource and scope
    assert challenged["error"] == "UnauthorizedError"
    state = challenged["state"]
    assert state["resourceMetadataUrl"] == (
        f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp"
    )
    assert state["resourceMetadata"]["resource"] == server.url
    assert state["resourceMetadata"]["authorization_servers"] == [issuer.url]
    assert state["authorizationServerUrl"] == issuer.url
    authorization = urlsplit(challenged["authorizationUrl"])
    query = parse_qs(authorization.query)
    assert f"{authorization.scheme}://{authorization.netloc}{authorization.path}" == (
        f"{issuer.url}/authorize"
    )
    assert query["resource"] == [server.url]
    assert query["scope"] == ["tools:call"]
