"""The token decides, over real HTTP with a real worker: the tools a requester sees and may
call (refused before anything is stored), the runs it may use (the first requester owns a run;
another one is told it does not exist) and the tasks it sees (its own only)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from boundary import CanonicalKey, ErrorCode, RedisCanonicalStore, RunContext
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tests.mcp.conftest import RUN, RUN_ID
from tests.mcp.issuer import Issuer, serving_issuer
from tests.mcp.servers import HttpServer, http_client, oauth_server


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with serving_issuer() as served:
        yield served


@pytest.fixture(scope="module")
def guarded(logs: Path, issuer: Issuer) -> Iterator[HttpServer]:
    with oauth_server(logs / "access.log", {issuer.url: issuer.jwks_uri}) as server:
        yield server


def meta(call_id: str, run_id: str | None = RUN_ID) -> dict[str, Any]:
    fields = {TOOL_CALL_ID_META: call_id}
    if run_id is not None:
        fields[RUN_ID_META] = run_id
    return fields


async def call(server: HttpServer, token: str, tool: str, call_meta: dict[str, Any]) -> Any:
    async with http_client(server.url, token=token) as client:
        return await client.call_tool(tool, {"query": "x"}, meta=call_meta)


async def raw(server: HttpServer, token: str, method: str, params: dict[str, Any]) -> Any:
    """One request on a 2025-11-25 connection, through the SDK's dispatcher; an error's code."""
    async with http_client(server.url, token=token, mode="legacy") as client:
        try:
            return await client.session._dispatcher.send_raw_request(method, params, None)
        except MCPError as exc:
            return exc.code


def code_of(result: Any) -> str | None:
    assert result.is_error is True
    code: str | None = result.structured_content["error_code"]
    return code


@pytest.mark.parametrize(
    "scopes", [{"scope": "tools:call:lookup"}, {"scope": None, "scp": ["tools:call:lookup"]}]
)
def test_a_tool_outside_the_tokens_scopes_is_hidden_and_refused_before_anything_is_stored(
    guarded: HttpServer,
    issuer: Issuer,
    opened_run: RunContext,
    store: RedisCanonicalStore,
    scopes: dict[str, Any],
) -> None:
    # Given a token allowed one tool (in ``scope``, or in ``scp`` as a list)
    token = issuer.token(guarded.url, **scopes)

    async def scenario() -> tuple[list[str], Any, Any, Any, Any]:
        async with http_client(guarded.url, token=token) as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]
            hidden = await client.call_tool("sleepy", {"seconds": 0.1}, meta=meta("call-hidden"))
            unknown = await client.call_tool("no_such_tool", {}, meta=meta("call-unknown"))
            allowed = await client.call_tool("lookup", {"query": "x"}, meta=meta("call-allowed"))
        as_task = await raw(
            guarded,
            token,
            "tools/call",
            {"name": "sleepy", "arguments": {}, "task": {}, "_meta": meta("call-hidden-task")},
        )
        return listed, hidden, unknown, allowed, as_task

    listed, hidden, unknown, allowed, as_task = anyio.run(scenario)
    # Then tools/list shows only that tool
    assert listed == ["lookup"]
    # And another tool, existing or not, is refused with the preflight's code...
    assert code_of(hidden) == code_of(unknown) == ErrorCode.UNAUTHORIZED.value
    assert as_task == -32602  # a task-augmented call: no task created
    # ...before anything was stored
    for call_id in ("call-hidden", "call-unknown", "call-hidden-task"):
        assert store.get(CanonicalKey(run_id=RUN_ID, tool_call_id=call_id)) is None
    # While the allowed tool runs
    assert allowed.is_error is False


def test_a_run_belongs_to_its_first_requester_and_is_not_found_for_another(
    guarded: HttpServer, issuer: Issuer, opened_run: RunContext
) -> None:
    alice = issuer.token(guarded.url, sub="alice")
    bob = issuer.token(guarded.url, sub="bob")
    # Given alice used the run first
    assert anyio.run(call, guarded, alice, "lookup", meta("call-alice")).is_error is False
    # When bob, with a valid token, names her run, and a run that does not exist
    in_hers = anyio.run(call, guarded, bob, "lookup", meta("call-bob"))
    in_none = anyio.run(call, guarded, bob, "lookup", meta("call-bob", run_id="run-never"))
    # Then both answers are the same "not found": nothing says her run exists
    assert code_of(in_hers) == code_of(in_none) == ErrorCode.RUN_NOT_FOUND.value
    assert in_hers.structured_content == in_none.structured_content
    # And alice goes on using it, also with a new token (the run is the subject's, not a token's)
    renewed = issuer.token(guarded.url, sub="alice", jti="renewed")
    assert anyio.run(call, guarded, renewed, "lookup", meta("call-alice-2")).is_error is False


def test_a_run_the_harness_opened_for_a_tenant_is_only_that_tenants(
    guarded: HttpServer,
    issuer: Issuer,
    opened_run: RunContext,
    store: RedisCanonicalStore,
) -> None:
    # Given a run opened for tenant bob
    assert store.open_run(RUN.model_copy(update={"run_id": "run-bobs", "tenant": "bob"})).is_open
    alice = issuer.token(guarded.url, sub="alice")
    bob = issuer.token(guarded.url, sub="bob")
    # When alice uses it first, then bob
    by_alice = anyio.run(call, guarded, alice, "lookup", meta("call-a", run_id="run-bobs"))
    by_bob = anyio.run(call, guarded, bob, "lookup", meta("call-b", run_id="run-bobs"))
    # Then alice is told it does not exist, and bob is served
    assert code_of(by_alice) == ErrorCode.RUN_NOT_FOUND.value
    assert by_bob.is_error is False


def test_a_task_of_one_subject_is_not_found_for_another(
    guarded: HttpServer, issuer: Issuer, opened_run: RunContext
) -> None:
    alice = issuer.token(guarded.url, sub="alice")
    renewed = issuer.token(guarded.url, sub="alice", jti="renewed")
    bob = issuer.token(guarded.url, sub="bob")

    async def scenario() -> tuple[Any, Any, Any, list[Any], Any]:
        created = await raw(
            guarded,
            alice,
            "tools/call",
            {"name": "lookup", "arguments": {"query": "x"}, "task": {}, "_meta": meta("call-t")},
        )
        task_id = created["task"]["taskId"]
        own = await raw(guarded, renewed, "tasks/get", {"taskId": task_id})
        listed = await raw(guarded, renewed, "tasks/list", {})
        others = [
            await raw(guarded, bob, method, {"taskId": task_id})
            for method in ("tasks/get", "tasks/result", "tasks/cancel")
        ]
        elsewhere = await raw(guarded, bob, "tasks/list", {})
        return task_id, own, listed, others, elsewhere

    task_id, own, listed, others, elsewhere = anyio.run(scenario)
    # Then alice reads and lists her task, also with a new token; bob, with a valid token,
    # gets "not found" for it
    assert own["taskId"] == task_id
    assert [task["taskId"] for task in listed["tasks"]] == [task_id]
    assert others == [-32602, -32602, -32602]
    assert elsewhere["tasks"] == []


def test_the_servers_run_is_owned_too(logs: Path, issuer: Issuer, opened_run: RunContext) -> None:
    with oauth_server(
        logs / "access-run.log", {issuer.url: issuer.jwks_uri}, "--run", RUN_ID
    ) as server:
        alice = issuer.token(server.url, sub="alice")
        bob = issuer.token(server.url, sub="bob")
        # When alice, then bob, call without naming a run (the server's --run)
        by_alice = anyio.run(call, server, alice, "lookup", meta("call-a", run_id=None))
        by_bob = anyio.run(call, server, bob, "lookup", meta("call-b", run_id=None))
    # Then the run is alice's: bob is told it does not exist
    assert by_alice.is_error is False
    assert code_of(by_bob) == ErrorCode.RUN_NOT_FOUND.value
