"""The Tasks extension (SEP-2663) against real server processes and a real worker: a task is
its canonical record, so any server process answers for it, across a kill and a restart."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from boundary import CanonicalKey, ErrorCode, InvocationStatus, RedisCanonicalStore, RunContext
from tasks.mcp_server.client import DetailedTask, TaskHandle, cancel_task, get_task, wait_task
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tests.celery.test_cancel import TaskEvents
from tests.mcp.conftest import RUN_ID
from tests.mcp.servers import TEST_POLL_INTERVAL_MS, HttpServer, http_client


def meta(tool_call_id: str) -> dict[str, Any]:
    return {RUN_ID_META: RUN_ID, TOOL_CALL_ID_META: tool_call_id}


async def start_task(server: HttpServer, tool: str, arguments: dict[str, Any], call_id: str) -> Any:
    """A task-augmented ``tools/call``: the server answers with the task handle at once."""
    async with http_client(server.url, tasks=True) as client:
        return await client.session.call_tool(
            tool, arguments, meta=meta(call_id), allow_claimed=True
        )


async def poll(server: HttpServer, task_id: str, timeout_s: float = 30.0) -> DetailedTask:
    async with http_client(server.url, tasks=True) as client:
        return await wait_task(client.session, task_id, timeout_s=timeout_s)


def test_a_task_created_on_one_server_completes_on_another(
    server_a: HttpServer, server_b: HttpServer, opened_run: RunContext
) -> None:
    # Given a slow call made as a task through server A
    handle = anyio.run(start_task, server_a, "sleepy", {"seconds": 2.0}, "call-ab")
    # Then A answered at once with the task: working, its id random (not the call's canonical
    # identity, which is in _meta)
    assert isinstance(handle, TaskHandle)
    assert handle.result_type == "task"
    assert RUN_ID not in handle.task_id and "call-ab" not in handle.task_id
    assert len(handle.task_id) >= 32
    assert handle.status == "working"
    assert handle.poll_interval_ms == TEST_POLL_INTERVAL_MS
    assert handle.ttl_ms is not None and 590_000 <= handle.ttl_ms <= 601_000
    assert handle.meta is not None and handle.meta[TOOL_CALL_ID_META] == "call-ab"
    # When server B is polled for it
    task = anyio.run(poll, server_b, handle.task_id)
    # Then B reports it completed, with the tool's bounded result inlined
    assert task.status == "completed"
    result = task.call_result()
    assert result is not None and result.is_error is False
    assert result.structured_content["evidence_status"] == "EVIDENCE_FOUND"
    assert task.created_at == handle.created_at


def test_a_task_survives_its_server_being_killed_and_restarted(
    server_a: HttpServer, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    # Given a task running, created through server A
    handle = anyio.run(start_task, server_a, "sleepy", {"seconds": 2.5}, "call-restart")
    assert handle.status == "working"
    # When A is killed (SIGKILL: nothing is saved on the way out) and started again
    server_a.restart()
    # Then polling the new A gives the task's result, the same the record holds
    task = anyio.run(poll, server_a, handle.task_id)
    assert task.status == "completed"
    result = task.call_result()
    assert result is not None and result.is_error is False
    record = store.get(CanonicalKey(run_id=RUN_ID, tool_call_id="call-restart"))
    assert record is not None and record.status is InvocationStatus.READY
    assert result.structured_content["result"] == json.loads(record.agent_result or "null")


def test_a_cancelled_task_stays_cancelled_when_the_tool_returns(
    server_a: HttpServer,
    server_b: HttpServer,
    opened_run: RunContext,
    store: RedisCanonicalStore,
    events: TaskEvents,
) -> None:
    key = CanonicalKey(run_id=RUN_ID, tool_call_id="call-cancel")
    # Given a slow task that a worker is running (slow enough for a loaded machine to cancel
    # it through another server before it ends)
    handle = anyio.run(start_task, server_a, "sleepy", {"seconds": 4.0}, "call-cancel")
    assert events.wait_for(events.started, key.task_id("execute"))

    async def cancel_then_get() -> DetailedTask:
        async with http_client(server_b.url, tasks=True) as client:
            await cancel_task(client.session, handle.task_id)
            return await get_task(client.session, handle.task_id)

    # When it is cancelled through server B
    task = anyio.run(cancel_then_get)
    # Then it is cancelled at once, with the fixed sentence
    assert task.status == "cancelled"
    assert task.status_message == ErrorCode.CANCELLED.message
    assert task.result is None
    # When the tool returns afterwards
    assert events.wait_for(events.finished, key.task_id("execute"))
    # Then the task and its record never change again
    again = anyio.run(poll, server_a, handle.task_id)
    assert again.status == "cancelled"
    record = store.get(key)
    assert record is not None and record.error_code is ErrorCode.CANCELLED and record.raw is None


def test_an_error_ends_the_task_completed_with_an_error_result(
    server_a: HttpServer, opened_run: RunContext
) -> None:
    handle = anyio.run(start_task, server_a, "boom", {"query": "x"}, "call-task-boom")
    task = anyio.run(poll, server_a, handle.task_id)
    # SEP-2663: a tool error is a completed task whose result has isError (failed is kept
    # for JSON-RPC errors)
    assert task.status == "completed"
    result = task.call_result()
    assert result is not None and result.is_error is True
    assert result.structured_content["error_code"] == "TOOL_EXECUTION_FAILED"


@pytest.mark.parametrize("task_id", [f"{RUN_ID}:call-none", "not-a-task", "a:b:c", ""])
def test_an_unknown_task_id_is_the_protocols_invalid_params_error(
    server_a: HttpServer, opened_run: RunContext, task_id: str
) -> None:
    async def scenario() -> tuple[MCPError, MCPError]:
        async with http_client(server_a.url, tasks=True) as client:
            with pytest.raises(MCPError) as on_get:
                await get_task(client.session, task_id)
            with pytest.raises(MCPError) as on_cancel:
                await cancel_task(client.session, task_id)
        return on_get.value, on_cancel.value

    on_get, on_cancel = anyio.run(scenario)
    assert on_get.code == on_cancel.code == -32602
    assert on_get.message == "Failed to retrieve task: Task not found"


def test_a_client_without_the_extension_gets_results_not_tasks(
    server_a: HttpServer, opened_run: RunContext
) -> None:
    async def scenario() -> tuple[Any, MCPError]:
        async with http_client(server_a.url) as client:
            result = await client.call_tool("lookup", {"query": "x"}, meta=meta("call-plain"))
            with pytest.raises(MCPError) as refused:
                await get_task(client.session, f"{RUN_ID}:call-plain")
        return result, refused.value

    result, refused = anyio.run(scenario)
    # Then its call blocks until the outcome, and tasks/* is refused as the extension says
    assert result.is_error is False
    assert refused.code == -32021
    assert refused.data == {
        "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    }


def test_fifty_concurrent_task_calls_from_one_client_all_complete(
    server_a: HttpServer, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    results: dict[int, Any] = {}

    async def scenario() -> None:
        async with http_client(server_a.url, tasks=True) as client:

            async def one(n: int) -> None:
                results[n] = await client.call_tool(
                    "lookup", {"query": f"q{n}"}, meta=meta(f"call-many-{n}")
                )

            async with anyio.create_task_group() as group:
                for n in range(50):
                    group.start_soon(one, n)

    # When 50 task-augmented calls run at once (the client's extension polls each to its end)
    anyio.run(scenario)
    # Then every one completed with its own result, and each has its own READY record
    assert len(results) == 50
    for n, result in results.items():
        assert result.is_error is False
        assert result.structured_content["scope"] == {"query": f"q{n}"}
        record = store.get(CanonicalKey(run_id=RUN_ID, tool_call_id=f"call-many-{n}"))
        assert record is not None and record.status is InvocationStatus.READY
