"""``tools/list`` and ``tools/call`` with the SDK's own client, a real server process and a
real worker: each check runs over HTTP on its own, and all of them in one stdio session (the
client launches the server; one launch keeps the suite short)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from boundary import CanonicalKey, ErrorCode, InvocationStatus, RedisCanonicalStore, RunContext
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tests.mcp.conftest import RUN_ID
from tests.mcp.servers import HttpServer, http_client, http_server, stdio_client
from tests.support.celery_tools import SECRET, SECRET_URL

Check = Callable[[Client, RedisCanonicalStore], Awaitable[None]]


def call_meta(tool_call_id: str | None = None, run_id: str | None = RUN_ID) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if run_id is not None:
        meta[RUN_ID_META] = run_id
    if tool_call_id is not None:
        meta[TOOL_CALL_ID_META] = tool_call_id
    return meta


def record(store: RedisCanonicalStore, tool_call_id: str, run_id: str = RUN_ID) -> Any:
    return store.get(CanonicalKey(run_id=run_id, tool_call_id=tool_call_id))


async def tools_are_listed_read_only_with_their_schema(
    client: Client, store: RedisCanonicalStore
) -> None:
    listing = await client.list_tools()
    tools = {tool.name: tool for tool in listing.tools}
    # Every read-only test tool is there, marked read-only; the writer is not offered
    assert {"lookup", "boom", "sleepy"} <= set(tools)
    assert "writer" not in tools
    for tool in tools.values():
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.input_schema.get("type") == "object"


async def a_call_ends_ready_with_the_bounded_result_and_its_ids(
    client: Client, store: RedisCanonicalStore
) -> None:
    result = await client.call_tool("lookup", {"query": "timeouts"}, meta=call_meta("call-ok"))
    # The bounded projection comes back as structured content and as text
    assert result.is_error is False
    payload = {
        "status": "READY",
        "evidence_status": "EVIDENCE_FOUND",
        "result": {"count": 3, "first": "doc-0"},
        "scope": {"query": "timeouts"},
    }
    assert result.structured_content == payload
    assert json.loads(result.content[0].text) == payload
    assert result.meta is not None
    assert result.meta[TOOL_CALL_ID_META] == "call-ok"
    assert result.meta[RUN_ID_META] == RUN_ID
    # And the canonical record holds the call under the agent's exact id, with its raw data
    stored = record(store, "call-ok")
    assert stored is not None and stored.status is InvocationStatus.READY
    assert stored.raw is not None and "timeouts 0" in stored.raw


async def a_call_without_an_id_gets_a_minted_one_back(
    client: Client, store: RedisCanonicalStore
) -> None:
    result = await client.call_tool("lookup", {"query": "q"}, meta=call_meta())
    minted = result.meta[TOOL_CALL_ID_META]
    assert minted.startswith("mcp-")
    assert record(store, minted) is not None


async def a_repeated_tool_call_id_is_refused_and_not_executed(
    client: Client, store: RedisCanonicalStore
) -> None:
    first = await client.call_tool("lookup", {"query": "one"}, meta=call_meta("call-dup"))
    second = await client.call_tool("lookup", {"query": "two"}, meta=call_meta("call-dup"))
    assert first.is_error is False
    # The second (other arguments) is DUPLICATE_TOOL_CALL_CONFLICT, the first record untouched
    assert second.is_error is True
    assert second.structured_content == {
        "status": "ERROR",
        "error_code": "DUPLICATE_TOOL_CALL_CONFLICT",
        "message": ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT.message,
    }
    stored = record(store, "call-dup")
    assert stored is not None and json.loads(stored.request) == {"query": "one"}


async def a_failing_tool_is_an_error_result_with_its_code_only(
    client: Client, store: RedisCanonicalStore
) -> None:
    result = await client.call_tool("boom", {"query": "x"}, meta=call_meta("call-boom"))
    assert result.is_error is True
    expected = {
        "status": "ERROR",
        "error_code": "TOOL_EXECUTION_FAILED",
        "message": ErrorCode.TOOL_EXECUTION_FAILED.message,
    }
    assert json.loads(result.content[0].text) == result.structured_content == expected
    text = result.model_dump_json()
    for leak in (SECRET, SECRET_URL, "Traceback", "tb:{"):
        assert leak not in text


async def an_unknown_run_executes_nothing(client: Client, store: RedisCanonicalStore) -> None:
    meta = call_meta("call-x", run_id="run-unknown")
    result = await client.call_tool("lookup", {"query": "x"}, meta=meta)
    assert result.is_error is True
    assert result.structured_content["error_code"] == "RUN_NOT_FOUND"
    assert record(store, "call-x", run_id="run-unknown") is None


async def a_closed_run_executes_nothing(client: Client, store: RedisCanonicalStore) -> None:
    # The Harness closes the run (the last check: nothing after it can use the run)
    assert store.close_run(RUN_ID) is True
    result = await client.call_tool("lookup", {"query": "x"}, meta=call_meta("call-closed"))
    assert result.is_error is True
    assert result.structured_content["error_code"] == "RUN_NOT_FOUND"
    assert record(store, "call-closed") is None


CHECKS: list[Check] = [
    tools_are_listed_read_only_with_their_schema,
    a_call_ends_ready_with_the_bounded_result_and_its_ids,
    a_call_without_an_id_gets_a_minted_one_back,
    a_repeated_tool_call_id_is_refused_and_not_executed,
    a_failing_tool_is_an_error_result_with_its_code_only,
    an_unknown_run_executes_nothing,
    a_closed_run_executes_nothing,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_over_http(
    check: Check, server_a: HttpServer, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    async def scenario() -> None:
        async with http_client(server_a.url) as client:
            await check(client, store)

    anyio.run(scenario)


def test_over_stdio(opened_run: RunContext, store: RedisCanonicalStore) -> None:
    # One server launched by the client; every check in its session, in order
    async def scenario() -> None:
        async with stdio_client("--run", RUN_ID) as client:
            # A request that names no run is a call of the server's --run
            meta = call_meta("call-server-run", run_id=None)
            result = await client.call_tool("lookup", {"query": "x"}, meta=meta)
            assert result.is_error is False
            assert result.meta[RUN_ID_META] == RUN_ID
            for check in CHECKS:
                await check(client, store)

    anyio.run(scenario)


def test_a_request_naming_no_run_on_a_server_without_one_runs_nothing(
    server_a: HttpServer, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    async def scenario() -> Any:
        async with http_client(server_a.url) as client:
            meta = call_meta("call-no-run", run_id=None)
            return await client.call_tool("lookup", {"query": "x"}, meta=meta)

    result = anyio.run(scenario)
    assert result.structured_content["error_code"] == "RUN_NOT_FOUND"
    assert record(store, "call-no-run") is None


def test_a_plain_call_waits_for_a_slow_tool(server_a: HttpServer, opened_run: RunContext) -> None:
    async def scenario() -> Any:
        async with http_client(server_a.url) as client:
            meta = call_meta("call-slow")
            return await client.call_tool("sleepy", {"seconds": 1.0}, meta=meta)

    result = anyio.run(scenario)
    assert result.is_error is False
    assert result.structured_content["result"]["first"] == "slept-0"


def test_a_plain_call_past_the_servers_wait_is_cancelled_and_says_so(
    logs: Path, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    # Given a server that waits at most 0.3 s for a plain call
    with http_server(logs / "short-wait.log", TOOL_BOUNDARY_MCP_CALL_WAIT_S="0.3") as server:

        async def scenario() -> Any:
            async with http_client(server.url) as client:
                meta = call_meta("call-too-slow")
                return await client.call_tool("sleepy", {"seconds": 1.5}, meta=meta)

        # When a call runs longer
        result = anyio.run(scenario)
    # Then it is cancelled, and the answer is what the record says
    assert result.is_error is True
    assert result.structured_content["error_code"] == "CANCELLED"
    stored = record(store, "call-too-slow")
    assert stored is not None and stored.error_code is ErrorCode.CANCELLED
