"""MCP Tasks as the 2025-11-25 specification defines them, driven by the Python SDK's client on
a 2025-11-25 connection (and a 2026-07-28 one for what must be refused), against the server's
handlers in-process with a boundary on real Redis."""

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
from tasks.mcp_server import tasks_2025
from tasks.mcp_server.options import ServerOptions
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tasks.mcp_server.server import build_server
from tasks.mcp_server.tasks_2025 import RELATED_TASK_META
from tests.support.celery_tools import registry

RUN = RunContext(run_id="run-tasks25", authorized_tools=frozenset({"lookup", "boom", "sleepy"}))


@pytest.fixture
def boundary(redis_client: redis.Redis) -> ToolBoundary:
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    built = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    assert built.open_run(RUN).is_open
    return built


def store_of(boundary: ToolBoundary) -> Any:
    return boundary.store


def meta(call_id: str) -> dict[str, Any]:
    return {RUN_ID_META: RUN.run_id, TOOL_CALL_ID_META: call_id}


def task_call(
    tool: str, arguments: dict[str, Any], call_id: str, ttl: int | None = None
) -> types.CallToolRequest:
    return types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=tool,
            arguments=arguments,
            task=types.TaskMetadata(ttl=ttl),
            _meta=meta(call_id),  # type: ignore[arg-type]
        )
    )


async def create_task(session: Any, request: types.CallToolRequest) -> types.CreateTaskResult:
    """A task-augmented ``tools/call`` through the SDK session's own JSON-RPC dispatcher: the
    SDK (2.3) sieves every 2025-11-25 ``tools/call`` answer as a ``CallToolResult``, so its
    typed ``send_request`` cannot receive a ``CreateTaskResult``."""
    params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
    raw = await session._dispatcher.send_raw_request("tools/call", params, None)
    return types.CreateTaskResult.model_validate(raw, by_name=False)


def get(task_id: str) -> types.GetTaskRequest:
    return types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))


def result_of(task_id: str) -> types.GetTaskPayloadRequest:
    return types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))


def cancel(task_id: str) -> types.CancelTaskRequest:
    return types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))


class Raw(types.Result):
    """Any result, kept as it came (extra fields allowed)."""

    model_config = {"extra": "allow"}


def test_a_2025_connection_announces_tasks_and_each_tools_task_support(
    boundary: ToolBoundary,
) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with Client(build_server(boundary), mode="legacy") as client:
            tools = await client.list_tools()
            return client.session.server_capabilities, tools

    capabilities, tools = anyio.run(scenario)
    assert capabilities.tasks is not None
    assert capabilities.tasks.list is not None and capabilities.tasks.cancel is not None
    assert capabilities.tasks.requests.tools.call is not None
    assert {tool.execution.task_support for tool in tools.tools} == {"optional"}


def test_a_task_augmented_call_creates_a_task_whose_result_waits_for_the_call(
    boundary: ToolBoundary,
) -> None:
    async def scenario() -> tuple[Any, Any, Any, Any]:
        async with Client(build_server(boundary), mode="legacy") as client:
            session = client.session
            created = await create_task(
                session, task_call("sleepy", {"seconds": 0.5}, "call-t1", ttl=60_000)
            )
            first = await session.send_request(get(created.task.task_id), types.GetTaskResult)
            result = await session.send_request(result_of(created.task.task_id), Raw)
            after = await session.send_request(get(created.task.task_id), types.GetTaskResult)
            return created, first, result, after

    created, first, result, after = anyio.run(scenario)
    task = created.task
    # Then the task is working, its id random (not the canonical identity), the requested ttl
    # honoured, the canonical ids in _meta
    assert task.status == "working"
    assert RUN.run_id not in task.task_id and len(task.task_id) >= 32
    assert task.ttl == 60_000 and first.ttl == 60_000 == after.ttl
    assert task.status_message and task.poll_interval
    assert created.meta == meta("call-t1")
    # And tasks/result waited for the call: the CallToolResult, with related-task _meta
    assert result.model_extra["isError"] is False
    assert result.meta[RELATED_TASK_META] == {"taskId": task.task_id}
    assert result.meta[TOOL_CALL_ID_META] == "call-t1"
    assert after.status == "completed" and after.created_at == task.created_at


def test_a_tool_error_is_a_failed_task_and_cancel_of_a_terminal_task_is_invalid_params(
    boundary: ToolBoundary,
) -> None:
    async def scenario() -> tuple[Any, Any, MCPError]:
        async with Client(build_server(boundary), mode="legacy") as client:
            session = client.session
            created = await create_task(session, task_call("boom", {"query": "x"}, "call-t2"))
            result = await session.send_request(result_of(created.task.task_id), Raw)
            task = await session.send_request(get(created.task.task_id), types.GetTaskResult)
            with pytest.raises(MCPError) as refused:
                await session.send_request(cancel(created.task.task_id), Raw)
            return result, task, refused.value

    result, task, refused = anyio.run(scenario)
    assert task.status == "failed"
    assert task.status_message is not None
    assert task.status_message.startswith("TOOL_EXECUTION_FAILED: ")
    assert result.model_extra["isError"] is True
    assert refused.code == -32602
    assert "terminal status 'failed'" in refused.message


def test_a_cancelled_task_stays_cancelled_and_its_result_is_an_error(
    boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    async def scenario() -> tuple[Any, Any, MCPError]:
        async with Client(build_server(boundary), mode="legacy") as client:
            session = client.session
            created = await create_task(session, task_call("sleepy", {"seconds": 2.0}, "call-t3"))
            cancelled = await session.send_request(
                cancel(created.task.task_id), types.CancelTaskResult
            )
            with pytest.raises(MCPError) as no_result:
                await session.send_request(result_of(created.task.task_id), Raw)
            return created, cancelled, no_result.value

    created, cancelled, no_result = anyio.run(scenario)
    assert cancelled.status == "cancelled" and cancelled.task_id == created.task.task_id
    assert no_result.code == -32603
    store = RedisCanonicalStore(client=redis_client)
    record = store.get(CanonicalKey(run_id=RUN.run_id, tool_call_id="call-t3"))
    assert record is not None and record.error_code is not None
    assert record.error_code.value == "CANCELLED"


def test_tasks_list_pages_newest_first_and_only_the_requesters_tasks(
    boundary: ToolBoundary, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of two, so three tasks take two pages
    monkeypatch.setattr(tasks_2025, "LIST_PAGE_SIZE", 2)
    pages: list[int] = []

    async def scenario() -> tuple[list[str], list[str], MCPError, MCPError]:
        server = build_server(boundary)
        async with Client(server, mode="legacy") as client:
            session = client.session
            made = []
            for n in range(3):
                created = await create_task(
                    session, task_call("lookup", {"query": f"q{n}"}, f"call-l{n}")
                )
                made.append(created.task.task_id)
            listed: list[str] = []
            cursor = None
            while True:
                page = await session.send_request(
                    types.ListTasksRequest(params=types.PaginatedRequestParams(cursor=cursor)),
                    types.ListTasksResult,
                )
                listed += [task.task_id for task in page.tasks]
                pages.append(len(page.tasks))
                cursor = page.next_cursor
                if cursor is None:
                    break
            with pytest.raises(MCPError) as bad_cursor:
                await session.send_request(
                    types.ListTasksRequest(params=types.PaginatedRequestParams(cursor="zz")),
                    types.ListTasksResult,
                )
        # Another session (another stdio server process) is another requester
        async with Client(build_server(boundary), mode="legacy") as other:
            with pytest.raises(MCPError) as foreign:
                await other.session.send_request(get(made[0]), types.GetTaskResult)
        return made, listed, bad_cursor.value, foreign.value

    made, listed, bad_cursor, foreign = anyio.run(scenario)
    assert listed == list(reversed(made))
    assert pages == [2, 1]
    assert bad_cursor.code == -32602
    assert foreign.code == -32602 and foreign.message == "Failed to retrieve task: Task not found"


def test_task_support_is_enforced_per_tool(boundary: ToolBoundary) -> None:
    async def scenario() -> tuple[MCPError, MCPError, Any]:
        options = ServerOptions(tool_task_support={"lookup": "forbidden", "sleepy": "required"})
        server = build_server(boundary, options)
        async with Client(server, mode="legacy") as client:
            session = client.session
            with pytest.raises(MCPError) as forbidden:
                await create_task(session, task_call("lookup", {"query": "x"}, "call-f"))
            with pytest.raises(MCPError) as required:
                await client.call_tool("sleepy", {"seconds": 0.1}, meta=meta("call-r"))
            tools = await client.list_tools()
        return forbidden.value, required.value, tools

    forbidden, required, tools = anyio.run(scenario)
    assert forbidden.code == required.code == -32601
    support = {tool.name: tool.execution.task_support for tool in tools.tools}
    assert support["lookup"] == "forbidden" and support["sleepy"] == "required"


def test_tasks_methods_and_task_params_are_refused_where_the_revision_has_no_tasks(
    boundary: ToolBoundary,
) -> None:
    async def scenario() -> tuple[MCPError, MCPError]:
        async with Client(build_server(boundary)) as client:  # 2026-07-28, no extension
            with pytest.raises(MCPError) as listed:
                await client.session.send_request(
                    types.ListTasksRequest(params=types.PaginatedRequestParams()),
                    types.ListTasksResult,
                )
            with pytest.raises(MCPError) as augmented:
                await create_task(client.session, task_call("lookup", {"query": "x"}, "call-m"))
        return listed.value, augmented.value

    listed, augmented = anyio.run(scenario)
    # tasks/list is a 2025-11-25 method; 2026-07-28 has no params.task (the SDK's surface
    # refuses it as invalid params): refused, never run as a plain call
    assert listed.code == -32601
    assert augmented.code == -32602
    assert store_of(boundary).get(CanonicalKey(run_id=RUN.run_id, tool_call_id="call-m")) is None


def test_require_call_id_refuses_a_call_without_the_agents_id(boundary: ToolBoundary) -> None:
    async def scenario() -> Any:
        server = build_server(boundary, ServerOptions(require_call_id=True))
        async with Client(server, mode="legacy") as client:
            return await client.call_tool("lookup", {"query": "x"}, meta={RUN_ID_META: RUN.run_id})

    result = anyio.run(scenario)
    assert result.is_error is True
    assert result.structured_content["error_code"] == "INVALID_TOOL_CALL_ID"


def test_a_task_augmented_call_refused_before_it_is_recorded_is_invalid_params(
    boundary: ToolBoundary,
) -> None:
    async def scenario() -> tuple[MCPError, MCPError]:
        async with Client(build_server(boundary), mode="legacy") as client:
            with pytest.raises(MCPError) as unknown:
                await create_task(client.session, task_call("no_such_tool", {}, "call-u"))
            with pytest.raises(MCPError) as unauthorized:
                await create_task(client.session, task_call("gate", {}, "call-g"))
        return unknown.value, unauthorized.value

    unknown, unauthorized = anyio.run(scenario)
    # Then no task: the spec's -32602 naming the code, with the agent's ids
    for refusal in (unknown, unauthorized):
        assert refusal.code == -32602
        assert refusal.data["error_code"] in refusal.message
    assert unknown.data["_meta"][TOOL_CALL_ID_META] == "call-u"
    assert store_of(boundary).get(CanonicalKey(run_id=RUN.run_id, tool_call_id="call-u")) is None
