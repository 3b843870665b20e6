"""The server's handlers in-process (the SDK's client connected to a ``Server`` object), for
what needs a boundary that misbehaves or a 2025-11-25 client; no worker needed."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
import redis
from mcp import Client
from mcp.shared.exceptions import MCPError

from boundary import (
    CanonicalKey,
    InProcessDispatcher,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
)
from boundary.store import keys
from tasks.mcp_server.client import CancelTaskRequest, TaskIdParams, TasksExtension, get_task
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tasks.mcp_server.server import build_server
from tests.support.celery_tools import SECRET, SECRET_URL, registry

RUN = RunContext(run_id="run-inproc", authorized_tools=frozenset({"lookup"}))


@pytest.fixture
def boundary(redis_client: redis.Redis) -> ToolBoundary:
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    built = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    assert built.open_run(RUN).is_open
    return built


def meta(call_id: str) -> dict[str, Any]:
    return {RUN_ID_META: RUN.run_id, TOOL_CALL_ID_META: call_id}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_an_unexpected_failure_is_a_fixed_internal_error(
    boundary: ToolBoundary, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # Given a boundary whose run lookup fails with text that must not leak
    def broken(run_id: str) -> None:
        raise RuntimeError(f"{SECRET} at {SECRET_URL}")

    monkeypatch.setattr(boundary, "get_run", broken)

    async def scenario() -> MCPError:
        async with Client(build_server(boundary), mode=mode) as client:  # type: ignore[arg-type]
            with pytest.raises(MCPError) as failed:
                await client.call_tool("lookup", {"query": "x"}, meta=meta("call-1"))
            return failed.value

    # When a call is made, on a 2025-11-25 connection and on a 2026-07-28 one
    error = anyio.run(scenario)
    # Then the client gets one fixed internal error, nothing of the exception's text
    assert error.code == -32603
    assert SECRET not in str(error.error) and "hunter2" not in str(error.error)


def test_a_2025_client_declaring_tasks_still_gets_a_plain_result(boundary: ToolBoundary) -> None:
    # Given a client on the 2025-11-25 handshake (the Tasks extension is 2026-07-28 only)
    async def scenario() -> Any:
        server = build_server(boundary)
        async with Client(server, mode="legacy", extensions=[TasksExtension()]) as client:
            return client.protocol_version, await client.call_tool(
                "lookup", {"query": "x"}, meta=meta("call-legacy")
            )

    version, result = anyio.run(scenario)
    # Then its call answers with the outcome, not a task
    assert version == "2025-11-25"
    assert result.is_error is False
    assert result.structured_content["status"] == "READY"


def test_a_tasks_ttl_is_fixed_at_creation_and_an_expired_task_is_not_found(
    boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    key = keys.record_key(CanonicalKey(run_id=RUN.run_id, tool_call_id="call-ttl"))

    async def scenario() -> tuple[Any, Any, Any, MCPError]:
        async with Client(build_server(boundary), extensions=[TasksExtension()]) as client:
            handle = await client.session.call_tool(
                "lookup", {"query": "x"}, meta=meta("call-ttl"), allow_claimed=True
            )
            first = await get_task(client.session, handle.task_id)
            await anyio.sleep(0.01)
            second = await get_task(client.session, handle.task_id)
            # When the record is gone (expired)
            redis_client.delete(key)
            with pytest.raises(MCPError) as gone:
                await get_task(client.session, handle.task_id)
            return handle, first, second, gone.value

    handle, first, second, gone = anyio.run(scenario)
    # Then ttlMs is the record's lifetime when the task was created, the same on every read
    assert 590_000 <= handle.ttl_ms <= 601_000
    assert handle.ttl_ms == first.ttl_ms == second.ttl_ms
    # And an expired task is the protocol's "not found"
    assert gone.code == -32602


def test_an_extension_task_is_bound_to_the_session_that_created_it(
    boundary: ToolBoundary,
) -> None:
    async def scenario() -> tuple[Any, MCPError, MCPError]:
        async with Client(build_server(boundary), extensions=[TasksExtension()]) as client:
            handle = await client.session.call_tool(
                "lookup", {"query": "x"}, meta=meta("call-bound"), allow_claimed=True
            )
            own = await get_task(client.session, handle.task_id)
        # Another stdio session (another server process): another requester
        async with Client(build_server(boundary), extensions=[TasksExtension()]) as other:
            with pytest.raises(MCPError) as read:
                await get_task(other.session, handle.task_id)
            with pytest.raises(MCPError) as cancelled:
                await other.session.send_request(
                    CancelTaskRequest(params=TaskIdParams(task_id=handle.task_id)), types.Result
                )
        return own, read.value, cancelled.value

    own, read, cancelled = anyio.run(scenario)
    assert own.status in {"working", "completed"}
    assert read.code == cancelled.code == -32602
    assert read.message == "Failed to retrieve task: Task not found"
