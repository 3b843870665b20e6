"""2025-11-25 Tasks over streamable HTTP against real server processes and a real worker: a task
is its canonical record, so ``tasks/result`` answers from any process, across a SIGKILL and a
restart; the SDK's client on 2025-11-25 and raw HTTP requests checked against the schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import redis
from mcp.shared.exceptions import MCPError

from boundary import CanonicalKey, ErrorCode, RedisCanonicalStore, RunContext
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tasks.mcp_server.tasks_2025 import RELATED_TASK_META
from tests.mcp.conftest import RUN_ID
from tests.mcp.raw import check
from tests.mcp.records import minted_key, sealed
from tests.mcp.servers import HttpServer, http_client, http_server


def answer_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST: the body, or the last ``data:`` event of an SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [
            line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")
        ]
        answer: dict[str, Any] = json.loads([e for e in events if e][-1])
        return answer
    return dict(response.json())


def meta(call_id: str) -> dict[str, Any]:
    return {RUN_ID_META: RUN_ID, TOOL_CALL_ID_META: call_id}


def call_diagnosis(
    server: HttpServer, store: RedisCanonicalStore, call_id: str, seen: list[Any], error: Exception
) -> str:
    """What a test that lost a call's answer knows: the record, the progress seen, the
    server's log tail."""
    record = store.get(CanonicalKey(run_id=RUN_ID, tool_call_id=call_id), with_raw=False)
    state = None if record is None else record.model_dump(mode="json", exclude={"raw"})
    return (
        f"no answer ({type(error).__name__}: {error}); record: {state}; "
        f"{len(seen)} progress notification(s), last {seen[-1:]}; server log:\n"
        + server.log.read_text(errors="replace")[-4000:]
    )


async def send(server: HttpServer, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One request through the SDK's client on a 2025-11-25 connection (its dispatcher: the
    SDK's typed ``tools/call`` cannot receive a ``CreateTaskResult``)."""
    async with http_client(server.url, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        answer: dict[str, Any] = await client.session._dispatcher.send_raw_request(
            method, params, None
        )
        return answer


def test_tasks_result_answers_from_a_restarted_server_and_from_another(
    server_a: HttpServer, server_b: HttpServer, opened_run: RunContext
) -> None:
    # Given a slow task made through server A
    created = anyio.run(
        send,
        server_a,
        "tools/call",
        {
            "name": "sleepy",
            "arguments": {"seconds": 2.5},
            "task": {"ttl": 120000},
            "_meta": meta("call-http-restart"),
        },
    )
    check("CreateTaskResult", created)
    task_id = created["task"]["taskId"]
    # When A is killed (SIGKILL: nothing saved on the way out) and started again
    server_a.restart()
    # Then the new A waits for the call and answers its result
    result = anyio.run(send, server_a, "tasks/result", {"taskId": task_id})
    check("CallToolResult", result)
    assert result["isError"] is False
    assert result["_meta"][RELATED_TASK_META] == {"taskId": task_id}
    # And B knows the task as completed, with the ttl asked for
    task = anyio.run(send, server_b, "tasks/get", {"taskId": task_id})
    check("GetTaskResult", task)
    assert task["status"] == "completed" and task["ttl"] == 120000


@pytest.mark.parametrize("name", ["another-task", ""])
def test_an_mcp_name_header_naming_another_task_is_refused(
    server_a: HttpServer, opened_run: RunContext, name: str
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        created = await send(
            server_a,
            "tools/call",
            {"name": "lookup", "arguments": {"query": "x"}, "task": {}, "_meta": meta("call-n")},
        )
        task_id = created["task"]["taskId"]
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id}}
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = await http.post(
                server_a.url, json=body, headers={**headers, "Mcp-Name": name}
            )
            matching = await http.post(
                server_a.url, json=body, headers={**headers, "Mcp-Name": task_id}
            )
        return answer_of(refused), answer_of(matching)

    refused, matching = anyio.run(scenario)
    check("JSONRPCErrorResponse", refused)
    assert refused["error"]["code"] == -32602
    check("JSONRPCResultResponse", matching)
    check("GetTaskResult", matching["result"])


def test_http_without_a_token_offers_no_tasks_list(
    server_a: HttpServer, opened_run: RunContext
) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with http_client(server_a.url, mode="legacy") as client:
            capabilities = client.session.server_capabilities
            try:
                await client.session._dispatcher.send_raw_request("tasks/list", {}, None)
            except Exception as exc:
                return capabilities, exc
        return capabilities, None

    capabilities, refused = anyio.run(scenario)
    # The spec: a server that cannot tell requesters apart should not offer tasks/list
    assert capabilities.tasks is not None and capabilities.tasks.list is None
    assert capabilities.tasks.cancel is not None
    assert getattr(refused, "code", None) == -32601


def test_a_task_is_bound_to_the_token_that_created_it(logs: Path, opened_run: RunContext) -> None:
    # Given two servers on the same store, each guarded by its own token
    with (
        http_server(logs / "token-a.log", TOOL_BOUNDARY_MCP_TOKEN="tb-token-a-1f2e") as first,
        http_server(logs / "token-b.log", TOOL_BOUNDARY_MCP_TOKEN="tb-token-b-9c8d") as second,
    ):

        async def scenario() -> tuple[Any, Any, list[Any], list[int]]:
            async with http_client(first.url, token="tb-token-a-1f2e", mode="legacy") as client:
                dispatcher = client.session._dispatcher
                created = await dispatcher.send_raw_request(
                    "tools/call",
                    {
                        "name": "lookup",
                        "arguments": {"query": "x"},
                        "task": {},
                        "_meta": meta("call-token-a"),
                    },
                    None,
                )
                task_id = created["task"]["taskId"]
                own = await dispatcher.send_raw_request("tasks/get", {"taskId": task_id}, None)
                listed = await dispatcher.send_raw_request("tasks/list", {}, None)
            codes = []
            async with http_client(second.url, token="tb-token-b-9c8d", mode="legacy") as other:
                for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                    try:
                        await other.session._dispatcher.send_raw_request(
                            method, {"taskId": task_id}, None
                        )
                        codes.append(0)
                    except MCPError as exc:
                        codes.append(exc.code)
                elsewhere = await other.session._dispatcher.send_raw_request("tasks/list", {}, None)
            return own, listed, elsewhere["tasks"], codes

        own, listed, elsewhere, codes = anyio.run(scenario)
    # Then the token that created the task reads and lists it; another token cannot see it
    assert own["status"] in {"working", "completed"}
    assert [t["taskId"] for t in listed["tasks"]] == [own["taskId"]]
    assert elsewhere == []
    assert codes == [-32602, -32602, -32602]


def test_progress_reaches_an_http_client_during_a_plain_call(
    server_a: HttpServer, opened_run: RunContext, store: RedisCanonicalStore
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def scenario() -> Any:
        async with http_client(server_a.url, mode="legacy") as client:
            return await client.call_tool(
                "beating",
                {"steps": 8, "step_s": 0.3},
                # The call takes 2.4 s: a bound, so a lost answer fails here with what is known
                # (the SDK's client otherwise waits for ever once its stream breaks).
                read_timeout_seconds=60.0,
                meta=meta("call-http-progress"),
                progress_callback=on_progress,
            )

    try:
        result = anyio.run(scenario)
    except Exception as error:
        raise AssertionError(
            call_diagnosis(server_a, store, "call-http-progress", seen, error)
        ) from error
    # Then the answer came on the POST's event stream, after the progress notifications
    assert result.is_error is False
    assert seen and any((m or "").startswith("step ") for _, _, m in seen)


def test_an_http_client_that_gives_up_on_a_plain_call_cancels_it(
    server_a: HttpServer,
    opened_run: RunContext,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    started = tmp_path / "started"

    async def scenario() -> None:
        async with (
            http_client(server_a.url, mode="legacy") as client,
            anyio.create_task_group() as group,
        ):

            async def call() -> None:
                await client.call_tool(
                    "sleepy", {"seconds": 4.0, "started": str(started)}, meta={RUN_ID_META: RUN_ID}
                )

            group.start_soon(call)
            with anyio.fail_after(30):
                while not started.exists():
                    await anyio.sleep(0.02)
            # When the client gives up on the call (its request's stream closes)
            group.cancel_scope.cancel()

    anyio.run(scenario)
    # Then the call, its id minted by the server, is sealed CANCELLED
    record = sealed(store, minted_key(redis_client))
    assert record.error_code is ErrorCode.CANCELLED
