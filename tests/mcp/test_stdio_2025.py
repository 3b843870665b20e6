"""``tool-boundary mcp --transport stdio`` processes and a real worker, driven on 2025-11-25 by a
raw JSON-RPC client (every message checked against the published 2025-11-25 schema) and by the
Python SDK's client: Tasks, progress that keeps a plain call alive, and cancellation."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis
from mcp import Client, StdioServerParameters

from bench.rig.mcp_server import ROOT, server_command
from boundary import CanonicalKey, ErrorCode, InvocationStatus, RedisCanonicalStore, RunContext
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tasks.mcp_server.tasks_2025 import RELATED_TASK_META
from tests.mcp.conftest import RUN_ID
from tests.mcp.raw import RawStdioClient, check
from tests.mcp.records import minted_key, sealed
from tests.mcp.servers import server_env
from tests.support.helpers import wait_until

#: The servers' progress interval here, seconds (the default is 5).
PROGRESS_S = "0.2"


@pytest.fixture
def raw() -> Iterator[RawStdioClient]:
    client = RawStdioClient(server_env(TOOL_BOUNDARY_MCP_PROGRESS_S=PROGRESS_S))
    try:
        yield client
    finally:
        client.close()


def meta(call_id: str | None = None, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {RUN_ID_META: RUN_ID, **extra}
    if call_id is not None:
        fields[TOOL_CALL_ID_META] = call_id
    return fields


def wait_for_file(path: Path, timeout_s: float = 30.0) -> None:
    wait_until(path.exists, f"{path.name} to appear", timeout_s)


def test_a_raw_2025_client_runs_a_task_to_its_result_every_message_per_the_schema(
    raw: RawStdioClient, opened_run: RunContext
) -> None:
    # Given a 2025-11-25 session: the server announces tasks and each tool's support
    init = raw.initialize()
    check("InitializeResult", init["result"])
    assert init["result"]["capabilities"]["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    tools = raw.request("tools/list")["result"]
    check("ListToolsResult", tools)
    assert {tool["execution"]["taskSupport"] for tool in tools["tools"]} == {"optional"}
    # When a task-augmented call is made (a requested ttl)
    created = raw.request(
        "tools/call",
        {
            "name": "sleepy",
            "arguments": {"seconds": 0.5},
            "task": {"ttl": 60000},
            "_meta": meta("call-raw-task"),
        },
    )
    check("CreateTaskResult", created["result"])
    task = created["result"]["task"]
    assert task["status"] == "working" and task["ttl"] == 60000
    assert created["result"]["_meta"][TOOL_CALL_ID_META] == "call-raw-task"
    got = raw.request("tasks/get", {"taskId": task["taskId"]})["result"]
    check("GetTaskResult", got)
    # Then tasks/result waits for the call and answers its CallToolResult
    result = raw.request("tasks/result", {"taskId": task["taskId"]})["result"]
    check("CallToolResult", result)
    assert result["isError"] is False
    assert result["_meta"][RELATED_TASK_META] == {"taskId": task["taskId"]}
    # And the status change was announced on the session
    status = raw.notifications.get(timeout=30)
    while status["method"] != "notifications/tasks/status":
        status = raw.notifications.get(timeout=30)
    check("TaskStatusNotification", status)
    assert status["params"]["status"] == "completed"
    assert status["params"]["taskId"] == task["taskId"]
    # And tasks/list has it; cancelling it now is the spec's -32602
    listed = raw.request("tasks/list", {})["result"]
    check("ListTasksResult", listed)
    assert [t["taskId"] for t in listed["tasks"]] == [task["taskId"]]
    refused = raw.request("tasks/cancel", {"taskId": task["taskId"]})
    check("JSONRPCErrorResponse", refused)
    assert refused["error"]["code"] == -32602


def test_progress_keeps_a_plain_call_alive_until_its_result(
    raw: RawStdioClient, opened_run: RunContext
) -> None:
    raw.initialize()
    # When a plain call that takes a while asks for progress
    answer = raw.request(
        "tools/call",
        {
            "name": "sleepy",
            "arguments": {"seconds": 1.5},
            "_meta": meta("call-progress", progressToken="tok-1"),
        },
    )
    # Then notifications/progress came, each valid, increasing, for its token
    progress = []
    while not raw.notifications.empty():
        note = raw.notifications.get()
        if note["method"] == "notifications/progress":
            check("ProgressNotification", note)
            progress.append(note["params"])
    assert progress, "no progress was sent while the call ran"
    assert {p["progressToken"] for p in progress} == {"tok-1"}
    values = [p["progress"] for p in progress]
    assert values == sorted(values) and len(set(values)) == len(values)
    # And the call answered its outcome
    check("CallToolResult", answer["result"])
    assert answer["result"]["isError"] is False


def test_notifications_cancelled_cancels_a_plain_call(
    raw: RawStdioClient,
    opened_run: RunContext,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    raw.initialize()
    started = tmp_path / "started"
    # Given a plain call (its id minted by the server) that the worker is running
    request_id = raw.request_async(
        "tools/call",
        {"name": "sleepy", "arguments": {"seconds": 4.0, "started": str(started)}, "_meta": meta()},
    )
    wait_for_file(started)
    # When the client cancels the request
    raw.notify("notifications/cancelled", {"requestId": request_id, "reason": "user"})
    # Then the call is sealed CANCELLED (the request itself is never answered)
    record = sealed(store, minted_key(redis_client))
    assert record.error_code is ErrorCode.CANCELLED


@pytest.mark.parametrize("agent_id", [False, True])
def test_a_closed_pipe_cancels_a_plain_call_unless_it_carries_the_agents_id(
    opened_run: RunContext,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
    tmp_path: Path,
    agent_id: bool,
) -> None:
    client = RawStdioClient(server_env())
    try:
        client.initialize()
        started = tmp_path / "started"
        client.request_async(
            "tools/call",
            {
                "name": "sleepy",
                "arguments": {"seconds": 2.0, "started": str(started)},
                "_meta": meta("call-kept" if agent_id else None),
            },
        )
        wait_for_file(started)
        # When the client goes away (its pipe to the server closes)
        client.close_stdin()
        client.close()
    finally:
        client.close()
    key = CanonicalKey(run_id=RUN_ID, tool_call_id="call-kept") if agent_id else None
    record = sealed(store, key or minted_key(redis_client))
    # Then a minted-id call is cancelled; the agent's own call runs on (it can be asked for
    # again under its id)
    if agent_id:
        assert record.status is InvocationStatus.READY
    else:
        assert record.error_code is ErrorCode.CANCELLED


def test_the_python_sdk_client_on_2025_gets_progress_and_tasks(opened_run: RunContext) -> None:
    command = server_command("--transport", "stdio")
    params = StdioServerParameters(
        command=command[0],
        args=command[1:],
        env=server_env(TOOL_BOUNDARY_MCP_PROGRESS_S=PROGRESS_S),
        cwd=str(ROOT),
    )
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def scenario() -> tuple[str, Any, dict[str, Any]]:
        async with Client(params, mode="legacy") as client:
            result = await client.call_tool(
                "sleepy",
                {"seconds": 1.0},
                meta=meta("call-sdk-progress"),
                progress_callback=on_progress,
            )
            dispatcher = client.session._dispatcher
            created = await dispatcher.send_raw_request(
                "tools/call",
                {
                    "name": "lookup",
                    "arguments": {"query": "x"},
                    "task": {},
                    "_meta": meta("call-sdk-task"),
                },
                None,
            )
            payload = await dispatcher.send_raw_request(
                "tasks/result", {"taskId": created["task"]["taskId"]}, None
            )
            return client.protocol_version, result, {"created": created, "payload": payload}

    version, result, task = anyio.run(scenario)
    assert version == "2025-11-25"
    assert result.is_error is False and seen
    check("CreateTaskResult", task["created"])
    check("CallToolResult", task["payload"])
    assert json.loads(task["payload"]["content"][0]["text"])["status"] == "READY"


def test_progress_and_status_messages_carry_the_tools_heartbeat(
    raw: RawStdioClient, opened_run: RunContext, tmp_path: Path
) -> None:
    raw.initialize()
    # When a heartbeating tool is called plainly, asking for progress
    answer = raw.request(
        "tools/call",
        {
            "name": "beating",
            "arguments": {"steps": 8, "step_s": 0.3},
            "_meta": meta("call-beat-plain", progressToken=7),
        },
    )
    assert answer["result"]["isError"] is False
    progress = []
    while not raw.notifications.empty():
        note = raw.notifications.get()
        if note["method"] == "notifications/progress":
            check("ProgressNotification", note)
            progress.append(note["params"])
    # Then the notifications carry the tool's fraction (of 1) and its message
    with_message = [p for p in progress if p.get("message", "").startswith("step ")]
    assert with_message, progress
    assert all(p["total"] == 1.0 and 0 <= p["progress"] <= 1 for p in with_message)
    # When the same tool runs as a task
    created = raw.request(
        "tools/call",
        {
            "name": "beating",
            "arguments": {"steps": 8, "step_s": 0.3, "dir": str(tmp_path)},
            "task": {},
            "_meta": meta("call-beat-task", progressToken="task-tok"),
        },
    )["result"]
    task_id = created["task"]["taskId"]
    messages = set()
    while True:
        task = raw.request("tasks/get", {"taskId": task_id})["result"]
        if task["status"] != "working":
            break
        messages.add(task["statusMessage"])
        time.sleep(0.05)
    # Then while working its statusMessage was the tool's message
    assert any(m.startswith("step ") for m in messages), messages
    # And the task's progressToken stayed valid: progress came for it, with the tool's message
    for_task = []
    while not raw.notifications.empty():
        note = raw.notifications.get()
        if note["method"] == "notifications/progress":
            check("ProgressNotification", note)
            if note["params"]["progressToken"] == "task-tok":
                for_task.append(note["params"])
    assert any(p.get("message", "").startswith("step ") for p in for_task), for_task


def test_tasks_cancel_stops_a_heartbeating_tool(
    raw: RawStdioClient, opened_run: RunContext, tmp_path: Path
) -> None:
    raw.initialize()
    created = raw.request(
        "tools/call",
        {
            "name": "beating",
            "arguments": {"steps": 50, "step_s": 0.2, "dir": str(tmp_path)},
            "task": {},
            "_meta": meta("call-beat-cancel"),
        },
    )["result"]
    task_id = created["task"]["taskId"]
    wait_for_file(tmp_path / "call-beat-cancel-1-1")
    # When the task is cancelled while the tool runs
    cancelled = raw.request("tasks/cancel", {"taskId": task_id})["result"]
    check("CancelTaskResult", cancelled)
    assert cancelled["status"] == "cancelled"
    # Then the tool stops at its next heartbeat, long before its 50 steps
    exit_file = tmp_path / "call-beat-cancel-1-exit"
    wait_for_file(exit_file)
    assert exit_file.read_text() == "cancelled"
    assert not (tmp_path / "call-beat-cancel-1-49").exists()
    # And tasks/result is the cancelled task's error
    answer = raw.request("tasks/result", {"taskId": task_id})
    check("JSONRPCErrorResponse", answer)
    assert answer["error"]["code"] == -32603


def test_a_revision_without_tasks_gets_method_not_found_and_no_task_is_run(
    raw: RawStdioClient, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    # Given a 2025-06-18 session (that revision has no tasks)
    init = raw.initialize(revision="2025-06-18")
    assert init["result"]["protocolVersion"] == "2025-06-18"
    # When it asks for tasks/* or sends params.task
    codes = [
        raw.request(method, {"taskId": "anything"})["error"]["code"]
        for method in ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel")
    ]
    augmented = raw.request(
        "tools/call",
        {
            "name": "lookup",
            "arguments": {"query": "x"},
            "task": {"ttl": 1000},
            "_meta": meta("call-0618"),
        },
    )
    # Then each is the revision's "method not found", and the call was never run
    assert codes == [-32601] * 4
    assert augmented["error"]["code"] == -32601
    assert store.get(CanonicalKey(run_id=RUN_ID, tool_call_id="call-0618")) is None


def test_the_command_line_switch_and_settings_reach_the_server(opened_run: RunContext) -> None:
    # Given a server started with --require-call-id and a per-tool task support setting
    client = RawStdioClient(
        server_env(TOOL_BOUNDARY_MCP_TOOL_TASK_SUPPORT='{"sleepy": "required"}'),
        "--require-call-id",
    )
    try:
        client.initialize()
        tools = client.request("tools/list")["result"]["tools"]
        refused = client.request(
            "tools/call", {"name": "lookup", "arguments": {"query": "x"}, "_meta": meta()}
        )["result"]
        required = client.request(
            "tools/call", {"name": "sleepy", "arguments": {}, "_meta": meta("call-req")}
        )
    finally:
        client.close()
    support = {tool["name"]: tool["execution"]["taskSupport"] for tool in tools}
    assert support["sleepy"] == "required" and support["lookup"] == "optional"
    # Then a call without the agent's id is refused, and a required-task tool needs a task
    assert refused["isError"] is True
    assert refused["structuredContent"]["error_code"] == "INVALID_TOOL_CALL_ID"
    assert required["error"]["code"] == -32601
