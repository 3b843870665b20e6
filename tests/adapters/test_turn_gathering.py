"""Frameworks that invoke each tool call on its own (the Agents SDK, LangGraph's async
``ToolNode``) still hand a model turn's parallel calls to the boundary as ONE turn: one
``create_many`` of all of them (one store script), each call answered under its own id.

The store's ``create`` and ``create_many`` are watched through the real methods (each still
runs on the real Redis), with the real worker running the calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, Runner
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

from boundary import RunBoundary
from boundary.adapters import _gather
from boundary.adapters.agents import agent_tools
from boundary.adapters.langchain import tool_node
from tests.adapters.test_agents_sdk import ScriptedModel, function_call, offline  # noqa: F401
from tests.adapters.test_langgraph import call, graph, sync_graph


class Creates:
    """The calls the store was asked to create, per script: ``[n]`` for one ``create_many``
    of n calls, ``[1]`` for one ``create``."""

    def __init__(self) -> None:
        self.batches: list[int] = []


@pytest.fixture
def creates(handle: RunBoundary, monkeypatch: pytest.MonkeyPatch) -> Iterator[Creates]:
    store: Any = handle.boundary.store
    seen = Creates()
    create, create_many = store.create, store.create_many

    def one(key: Any, **terms: Any) -> Any:
        seen.batches.append(1)
        return create(key, **terms)

    def many(calls: Any) -> Any:
        seen.batches.append(len(calls))
        return create_many(calls)

    monkeypatch.setattr(store, "create", one)
    monkeypatch.setattr(store, "create_many", many)
    yield seen


def test_an_agents_sdk_turn_of_parallel_calls_is_created_in_one_script(
    handle: RunBoundary, creates: Creates
) -> None:
    # Given a model whose one turn asks for three tool calls at once
    model = ScriptedModel(
        [
            function_call("call_gt_1", "find", '{"query":"timeouts"}'),
            function_call("call_gt_2", "lookup", '{"query":"retries"}'),
            function_call("call_gt_3", "boom", '{"query":"x"}'),
        ]
    )
    agent = Agent(name="support", model=model, tools=agent_tools(handle))
    # When the runner runs it
    result = Runner.run_sync(agent, "Why do requests time out?")
    # Then the three calls were created together, in one script
    assert creates.batches == [3]
    # And each was answered under its own id
    answers = {
        item["call_id"]: json.loads(item["output"])
        for item in result.to_input_list()
        if item.get("type") == "function_call_output"
    }
    assert answers["call_gt_1"]["result"] == {"count": 3, "first": "doc-0"}
    assert answers["call_gt_2"]["status"] == "READY"
    assert answers["call_gt_3"]["error_code"] == "TOOL_EXECUTION_FAILED"


def test_a_langgraph_async_tool_node_turn_is_created_in_one_script(
    handle: RunBoundary, creates: Creates
) -> None:
    import asyncio

    # Given a model whose one turn asks for three tool calls at once
    model = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    "",
                    tool_calls=[
                        call("call_lg_1", "find", {"query": "timeouts"}),
                        call("call_lg_2", "lookup", {"query": "retries"}),
                        call("call_lg_3", "find", {"query": 7}),
                    ],
                ),
                AIMessage("done"),
            ]
        )
    )

    # When an async graph runs them through the adapter's ToolNode
    async def main() -> Any:
        try:
            return await graph(model, tool_node(handle)).ainvoke({"messages": [("user", "go")]})
        finally:
            await handle.boundary.aclose()  # type: ignore[attr-defined]

    state = asyncio.run(main())
    # Then the two calls that passed preflight were created together, in one script
    assert creates.batches == [2]
    # And each call was answered under its own id, the refused one with its code
    answers = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    assert answers["call_lg_1"].status == answers["call_lg_2"].status == "success"
    assert answers["call_lg_3"].status == "error"
    assert json.loads(str(answers["call_lg_3"].content))["error_code"] == "INVALID_ARGUMENTS"


def _three_calls(prefix: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    "",
                    tool_calls=[
                        call(f"{prefix}_1", "find", {"query": "timeouts"}),
                        call(f"{prefix}_2", "lookup", {"query": "retries"}),
                        call(f"{prefix}_3", "find", {"query": 7}),
                    ],
                ),
                AIMessage("done"),
            ]
        )
    )


def _answers(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


def test_a_langgraph_sync_tool_node_turn_is_created_in_one_script(
    handle: RunBoundary, creates: Creates, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model whose one turn asks for three tool calls at once, and a first call that
    # waits for the others as long as a busy machine may take to start their threads (the
    # 5 ms default can pass before the pool starts the second one; the turn then splits)
    monkeypatch.setattr(_gather, "SYNC_WINDOW_S", 30.0)
    model = _three_calls("call_ls")

    # When a sync graph runs them through the adapter's ToolNode (its thread pool)
    state = sync_graph(model, tool_node(handle)).invoke({"messages": [("user", "go")]})

    # Then the two calls that passed preflight were created together, in one script
    assert creates.batches == [2]
    # And each call was answered under its own id, the refused one with its code
    answers = _answers(state)
    assert answers["call_ls_1"].status == answers["call_ls_2"].status == "success"
    assert answers["call_ls_3"].status == "error"
    assert json.loads(str(answers["call_ls_3"].content))["error_code"] == "INVALID_ARGUMENTS"


def test_a_sync_tool_node_running_one_call_at_a_time_answers_every_call_without_hanging(
    handle: RunBoundary, creates: Creates
) -> None:
    # Given a sync graph whose ToolNode may run one call at a time (max_concurrency 1), so
    # the calls of the turn cannot all be there together
    model = _three_calls("call_l1")

    # When it runs the turn
    state = sync_graph(model, tool_node(handle)).invoke(
        {"messages": [("user", "go")]}, config={"max_concurrency": 1}
    )

    # Then each call went as it came, after the short wait for the others (none hung), and
    # each was answered under its own id
    assert creates.batches == [1, 1]
    answers = _answers(state)
    assert answers["call_l1_1"].status == answers["call_l1_2"].status == "success"
    assert answers["call_l1_3"].status == "error"
