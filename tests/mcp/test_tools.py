"""``tools/list`` and ``tools/call`` over stdio and streamable HTTP, with the SDK's own client,
a real server process and a real worker."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import pytest
from mcp import Client

from boundary import CanonicalKey, ErrorCode, InvocationStatus, RedisCanonicalStore, RunContext
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tests.celery_tools import SECRET, SECRET_URL
from tests.mcp.conftest import RUN_ID
from tests.mcp.servers import HttpServer, http_client, stdio_client

ClientFactory = Callable[[], AbstractAsyncContextManager[Client]]


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest) -> ClientFactory:
    """Each test runs over stdio (the client launches the server) and over HTTP."""
    if request.param == "stdio":
        return lambda: stdio_client("--run", RUN_ID)
    server: HttpServer = request.getfixturevalue("server_a")
    return lambda: http_client(server.url)


def call_meta(tool_call_id: str | None = None, run_id: str | None = RUN_ID) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if run_id is not None:
        meta[RUN_ID_META] = run_id
    if tool_call_id is not None:
        meta[TOOL_CALL_ID_META] = tool_call_id
    return meta


def run(coroutine: Callable[[], Any]) -> Any:
    return anyio.run(coroutine)


def test_tools_are_listed_read_only_with_their_schema(
    connect: ClientFactory, opened_run: RunContext
) -> None:
    async def scenario() -> Any:
        async with connect() as client:
            return await client.list_tools()

    listing = run(scenario)
    tools = {tool.name: tool for tool in listing.tools}
    # Then every read-only test tool is there, marked read-only; the writer is not offered
    assert {"lookup", "boom", "sleepy"} <= set(tools)
    assert "writer" not in tools
    for tool in tools.values():
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.input_schema.get("type") == "object"


def test_a_call_ends_ready_with_the_bounded_result_and_its_ids(
    connect: ClientFactory, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    async def scenario() -> Any:
        async with connect() as client:
            return await client.call_tool(
                "lookup", {"query": "timeouts"}, meta=call_meta("call-ready")
            )

    result = run(scenario)
    # Then the bounded projection comes back as structured content and as text
    assert result.is_error is False
    payload = {
        "evidence_status": "EVIDENCE_FOUND",
        "result": {"count": 3, "first": "doc-0"},
        "scope": {"query": "timeouts"},
    }
    assert result.structured_content == payload
    assert json.loads(result.content[0].text) == payload
    assert result.meta is not None
    assert result.meta[TOOL_CALL_ID_META] == "call-ready"
    assert result.meta[RUN_ID_META] == RUN_ID
    # And the canonical record holds the call under the agent's exact id, with its raw data
    record = store.get(CanonicalKey(run_id=RUN_ID, tool_call_id="call-ready"))
    assert record is not None and record.status is InvocationStatus.READY
    assert record.raw is not None and "timeouts 0" in record.raw


def test_a_call_without_an_id_gets_a_minted_one_back(
    connect: ClientFactory, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    async def scenario() -> Any:
        async with connect() as client:
            return await client.call_tool("lookup", {"query": "q"}, meta=call_meta())

    result = run(scenario)
    minted = result.meta[TOOL_CALL_ID_META]
    assert minted.startswith("mcp-")
    assert store.get(CanonicalKey(run_id=RUN_ID, tool_call_id=minted)) is not None


def test_a_repeated_tool_call_id_is_refused_and_not_executed(
    connect: ClientFactory, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with connect() as client:
            first = await client.call_tool("lookup", {"query": "one"}, meta=call_meta("call-dup"))
            second = await client.call_tool("lookup", {"query": "two"}, meta=call_meta("call-dup"))
            return first, second

    first, second = run(scenario)
    assert first.is_error is False
    # Then the second is DUPLICATE_TOOL_CALL, and the first record is untouched
    assert second.is_error is True
    assert second.structured_content == {
        "error_code": "DUPLICATE_TOOL_CALL",
        "message": ErrorCode.DUPLICATE_TOOL_CALL.message,
    }
    record = store.get(CanonicalKey(run_id=RUN_ID, tool_call_id="call-dup"))
    assert record is not None and json.loads(record.request) == {"query": "one"}


def test_a_failing_tool_is_an_error_result_with_its_code_only(
    connect: ClientFactory, opened_run: RunContext
) -> None:
    async def scenario() -> Any:
        async with connect() as client:
            return await client.call_tool("boom", {"query": "x"}, meta=call_meta("call-boom"))

    result = run(scenario)
    assert result.is_error is True
    assert result.content[0].text == (
        f"TOOL_EXECUTION_FAILED: {ErrorCode.TOOL_EXECUTION_FAILED.message}"
    )
    text = result.model_dump_json()
    for leak in (SECRET, SECRET_URL, "Traceback", "tb:{"):
        assert leak not in text


def test_an_unknown_run_executes_nothing(
    connect: ClientFactory, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    async def scenario() -> Any:
        async with connect() as client:
            return await client.call_tool(
                "lookup", {"query": "x"}, meta=call_meta("call-x", run_id="run-unknown")
            )

    result = run(scenario)
    assert result.is_error is True
    assert result.structured_content["error_code"] == "RUN_NOT_FOUND"
    assert store.get(CanonicalKey(run_id="run-unknown", tool_call_id="call-x")) is None
