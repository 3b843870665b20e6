"""2026-07-28 clients that declare the Tasks extension (as every fastmcp client does once
``fastmcp-tasks`` is imported): each tool's task support decides which calls become tasks, as
on 2025-11-25; a task's progress reaches the client, on a ``subscriptions/listen`` stream
(``notifications/tasks/status``) and in what a polling client reads (``tasks/get``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
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
from tasks.mcp_server.client import (
    DetailedTask,
    TaskHandle,
    TasksExtension,
    get_task,
    listen_tasks,
)
from tasks.mcp_server.options import ServerOptions
from tasks.mcp_server.results import PROGRESS_META, RUN_ID_META, TASKS_EXTENSION, TOOL_CALL_ID_META
from tasks.mcp_server.server import build_server
from tests.mcp.conftest import RUN_ID
from tests.mcp.servers import HttpServer, http_client, http_server
from tests.support import celery_tools
from tests.support.celery_tools import registry

RUN = RunContext(run_id="run-2026", authorized_tools=frozenset(spec.name for spec in registry))
#: Short tools answered at once, a long one always a task.
SUPPORT = {"lookup": "forbidden", "beating_long": "forbidden", "sleepy": "required"}


@pytest.fixture
def boundary(redis_client: redis.Redis) -> ToolBoundary:
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    built = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    assert built.open_run(RUN).is_open
    return built


def meta(call_id: str, run_id: str = RUN.run_id) -> dict[str, Any]:
    return {RUN_ID_META: run_id, TOOL_CALL_ID_META: call_id}


def test_each_tools_task_support_decides_which_calls_become_tasks(
    boundary: ToolBoundary,
) -> None:
    # Given a server whose short tool may not run as a task and whose slow one must
    server = build_server(boundary, ServerOptions(tool_task_support=SUPPORT))

    async def scenario() -> tuple[Any, Any, Any, MCPError]:
        async with Client(server, extensions=[TasksExtension()]) as client:
            # When a client that declares the extension calls each
            short = await client.session.call_tool(
                "lookup", {"query": "x"}, meta=meta("call-short"), allow_claimed=True
            )
            slow = await client.session.call_tool(
                "sleepy", {"seconds": 0.1}, meta=meta("call-slow"), allow_claimed=True
            )
            other = await client.session.call_tool(
                "beating", {"steps": 1}, meta=meta("call-other"), allow_claimed=True
            )
        async with Client(server) as plain:
            # And a client that does not declare it calls the one that must be a task
            assert plain.protocol_version == "2026-07-28"
            with pytest.raises(MCPError) as refused:
                await plain.call_tool("sleepy", {"seconds": 0.1}, meta=meta("call-refused"))
        return short, slow, other, refused.value

    short, slow, other, refused = anyio.run(scenario)
    # Then the short call is answered with its result, not a task
    assert not isinstance(short, TaskHandle)
    assert short.is_error is False and short.structured_content["status"] == "READY"
    # And the slow one, and one of a tool left optional, are tasks
    assert isinstance(slow, TaskHandle) and isinstance(other, TaskHandle)
    # And the client that cannot take a task is told what it lacks, nothing stored
    assert refused.code == -32021
    assert refused.error.data["requiredCapabilities"]["extensions"] == {TASKS_EXTENSION: {}}
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="call-refused")
    assert boundary.store.get(key, with_raw=False) is None


def test_a_polling_client_reads_the_tools_progress_in_tasks_get(boundary: ToolBoundary) -> None:
    async def scenario() -> list[DetailedTask]:
        async with Client(build_server(boundary), extensions=[TasksExtension()]) as client:
            handle = await client.session.call_tool(
                "beating",
                {"steps": 8, "step_s": 0.15},
                meta=meta("call-poll"),
                allow_claimed=True,
            )
            assert isinstance(handle, TaskHandle)
            seen: list[DetailedTask] = []
            with anyio.fail_after(20):
                while not seen or not seen[-1].terminal:
                    seen.append(await get_task(client.session, handle.task_id))
                    await anyio.sleep(0.1)
        return seen

    seen = anyio.run(scenario)
    working = [(t, t.meta[PROGRESS_META]) for t in seen if t.meta and PROGRESS_META in t.meta]
    assert working, f"no task with progress among {[t.status for t in seen]}"
    assert all(task.status == "working" for task, _ in working)
    fractions = [progress["progress"] for _, progress in working]
    assert all(0.0 <= f < 1.0 for f in fractions) and fractions == sorted(fractions)
    assert all(progress["total"] == 1.0 for _, progress in working)
    assert any((task.status_message or "").startswith("step ") for task, _ in working)
    assert seen[-1].status == "completed"


# --- over HTTP, real server processes and a real worker ---------------------------------


@pytest.fixture(scope="module")
def server_2026(logs: Path) -> Iterator[HttpServer]:
    support = json.dumps(SUPPORT)
    with http_server(logs / "support.log", TOOL_BOUNDARY_MCP_TOOL_TASK_SUPPORT=support) as server:
        yield server


def events(lines: list[str]) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an event stream's ``data:`` lines."""
    return [json.loads(line[5:]) for line in lines if line.startswith("data:") and line[5:].strip()]


def listen_request(task_ids: list[str], *, declare: bool = True) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if declare else {}
    return {
        "jsonrpc": "2.0",
        "id": "listen-1",
        "method": "subscriptions/listen",
        "params": {
            "notifications": {"tasksStatus": task_ids},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": capabilities,
            },
        },
    }


def listen(
    server: HttpServer, body: dict[str, Any], timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """One ``subscriptions/listen`` POST, read to its end: every message of its stream."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    lines: list[str] = []
    with httpx2.stream("POST", server.url, json=body, headers=headers, timeout=timeout_s) as r:
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            r.read()
            return [r.json()]
        lines.extend(r.iter_lines())
    return events(lines)


def test_a_listening_client_hears_its_tasks_progress_and_end(
    server_2026: HttpServer, opened_run: RunContext
) -> None:
    # Given a long call that a 2026-07-28 client declaring the extension made a task
    async def start() -> Any:
        async with http_client(server_2026.url, tasks=True) as client:
            return await client.session.call_tool(
                "beating",
                {"steps": 10, "step_s": 0.3},
                meta=meta("call-listen", RUN_ID),
                allow_claimed=True,
            )

    handle = anyio.run(start)
    assert isinstance(handle, TaskHandle)

    # When it listens for the task's status (and for a task that is not its own)
    messages = listen(server_2026, listen_request([handle.task_id, "no-such-task"]))

    # Then the stream is acknowledged first, for its own task only
    ack, *notes, closed = messages
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"tasksStatus": [handle.task_id]}
    statuses = [n["params"] for n in notes if n["method"] == "notifications/tasks/status"]
    assert len(statuses) == len(notes) >= 3
    # And it hears the tool's progress while it works: its message and its fraction
    working = [s for s in statuses if s["status"] == "working" and "_meta" in s]
    fractions = [
        s["_meta"][PROGRESS_META]["progress"] for s in working if PROGRESS_META in s["_meta"]
    ]
    assert len(fractions) >= 2 and fractions == sorted(fractions) and fractions[-1] > fractions[0]
    assert any(s.get("statusMessage", "").startswith("step ") for s in working)
    # And its end, with the result, as tasks/get would give it
    final = statuses[-1]
    assert final["taskId"] == handle.task_id and final["status"] == "completed"
    assert final["result"]["structuredContent"]["status"] == "READY"
    assert all(s["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1" for s in statuses)
    # And the subscription closes gracefully once nothing is left to tell
    assert closed["id"] == "listen-1" and "result" in closed


def test_listening_for_tasks_needs_the_extension(
    server_2026: HttpServer, opened_run: RunContext
) -> None:
    (answer,) = listen(server_2026, listen_request(["any-task"], declare=False))
    assert answer["error"]["code"] == -32021


def test_a_fastmcp_client_declaring_tasks_gets_progress_of_a_call_that_is_not_a_task(
    server_2026: HttpServer, opened_run: RunContext
) -> None:
    fastmcp = pytest.importorskip("fastmcp")
    # Given a fastmcp client that declares the Tasks extension (fastmcp-tasks does so for
    # every client), and a tool whose calls may not run as tasks
    progress: list[tuple[float, float | None, str | None]] = []

    async def report(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def scenario() -> Any:
        client = fastmcp.Client(
            server_2026.url, extensions=[TasksExtension()], progress_handler=report
        )
        async with client:
            return await client.call_tool(
                "beating_long",
                {"steps": 6, "step_s": 0.3},
                meta=meta("call-fastmcp", RUN_ID),
            )

    # When it calls the tool
    result = anyio.run(scenario)

    # Then the call is answered when it ends, and its progress reached the client meanwhile
    assert result.is_error is False
    assert result.structured_content["status"] == "READY"
    assert len(progress) >= 2
    assert any(message and message.startswith("step ") for _, _, message in progress)
    assert [value for value, _, _ in progress] == sorted(value for value, _, _ in progress)


def test_a_listening_sdk_client_hears_its_tasks_progress_and_end(boundary: ToolBoundary) -> None:
    # Given the SDK's client (mcp 2.3.0) declaring the extension, hearing task statuses, and
    # a tool that reports half way and heartbeats until the client has heard that (so the
    # test does not depend on the listener subscribing before a quick tool ends; a listener
    # that never hears progress leaves the tool to its time limit, and the task failed)
    heard: list[DetailedTask] = []
    celery_tools.BEAT_GATE.clear()

    async def hear(task: DetailedTask) -> None:
        heard.append(task)
        if task.meta and PROGRESS_META in task.meta:
            celery_tools.BEAT_GATE.set()

    async def scenario() -> dict[str, Any]:
        extension = TasksExtension(on_status=hear)
        async with Client(build_server(boundary), extensions=[extension]) as client:
            handle = await client.session.call_tool(
                "beat_until_set", {}, meta=meta("call-hear"), allow_claimed=True
            )
            assert isinstance(handle, TaskHandle)
            # When it listens for its task, until the stream closes
            with anyio.fail_after(20):
                return await listen_tasks(client.session, [handle.task_id], "listen-sdk")

    try:
        closed = anyio.run(scenario)
    finally:
        celery_tools.BEAT_GATE.set()
    # Then it heard the task work (the tool's progress) and end, with the result
    assert len(heard) >= 2
    assert heard[-1].status == "completed" and heard[-1].call_result() is not None
    assert any(task.meta and PROGRESS_META in task.meta for task in heard[:-1])
    # And the subscription closed gracefully once nothing was left to tell
    assert closed["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-sdk"
