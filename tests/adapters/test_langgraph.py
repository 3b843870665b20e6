"""LangChain tools in a real LangGraph graph (``ToolNode``), driven by LangChain's fake chat
model, every tool call run by the real Celery worker."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from boundary import RunBoundary
from tests.adapters.conftest import Gate
from tests.support.celery_tools import FIND_SCHEMA, SECRET

pytest.importorskip("langgraph")
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from boundary.adapters.langchain import langchain_tools, tool_node

RAW_ONLY = "timeouts 0"


def call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args, "type": "tool_call"}


def graph(model: GenericFakeChatModel, tools: ToolNode) -> Any:
    async def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", think)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile()


def sync_graph(model: GenericFakeChatModel, tools: ToolNode) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile()


def test_tool_node_answers_each_call_under_its_id(
    handle: RunBoundary, record: Callable[[str], Any]
) -> None:
    # Given a model that calls three tools, then one id again, then answers
    model = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    "",
                    tool_calls=[
                        call("call_lc_find-1", "find", {"query": "timeouts"}),
                        call("call_lc_boom.2", "boom", {"query": "x"}),
                        call("call_lc_bad_3", "find", {"query": 7}),
                    ],
                ),
                AIMessage("", tool_calls=[call("call_lc_find-1", "find", {"query": "again"})]),
                AIMessage("Three documents mention timeouts."),
            ]
        )
    )
    # When a graph runs the calls through a ToolNode of the adapter's tools
    tools = langchain_tools(handle)
    state = sync_graph(model, ToolNode(tools)).invoke({"messages": [("user", "why?")]})
    # Then the model is offered the registry's declarations
    declared = convert_to_openai_tool(next(t for t in tools if t.name == "find"))["function"]
    assert declared["description"] == "Find documents about a query."
    assert declared["parameters"]["properties"] == FIND_SCHEMA["properties"]
    # and each call is answered under its own id with LangChain's error convention
    answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in answers] == [
        "call_lc_find-1",
        "call_lc_boom.2",
        "call_lc_bad_3",
        "call_lc_find-1",
    ]
    found, boom, bad, repeated = answers
    assert found.status == "success"
    assert json.loads(found.content)["result"] == {"count": 3, "first": "doc-0"}
    assert found.artifact == {"run_id": handle.run_id, "tool_call_id": "call_lc_find-1"}
    assert boom.status == "error"
    assert json.loads(boom.content)["error_code"] == "TOOL_EXECUTION_FAILED"
    assert boom.artifact is None
    assert bad.status == "error"
    assert json.loads(bad.content)["error_path"] == "/properties/query/type"
    assert repeated.status == "error"
    assert json.loads(repeated.content)["error_code"] == "DUPLICATE_TOOL_CALL_CONFLICT"
    # and the first record is untouched, nothing raw in what the model saw
    assert json.loads(record("call_lc_find-1").request) == {"query": "timeouts"}
    shown = "".join(str(m.content) for m in state["messages"])
    assert RAW_ONLY not in shown and SECRET not in shown
    assert state["messages"][-1].content == "Three documents mention timeouts."


def test_a_tool_invoked_without_a_call_id_is_refused(handle: RunBoundary) -> None:
    find = next(t for t in langchain_tools(handle) if t.name == "find")
    assert json.loads(find.invoke({"query": "timeouts"}))["error_code"] == "INVALID_TOOL_CALL_ID"


def test_async_graph_leaves_the_event_loop_free(handle: RunBoundary, gate: Gate) -> None:
    model = GenericFakeChatModel(
        messages=iter(
            [AIMessage("", tool_calls=[call("call_lc_gate", "gate", {})]), AIMessage("done")]
        )
    )
    app = graph(model, tool_node(handle))

    async def main() -> Any:
        state, _ = await asyncio.gather(app.ainvoke({"messages": [("user", "go")]}), gate.opener())
        return state

    state = asyncio.run(main())

    answer = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert json.loads(answer.content)["result"]["first"] == "opened"


def test_a_graph_resumed_from_its_checkpoint_gets_its_tool_calls_results_without_rerunning(
    celery_boundary: Any, tmp_path: Any
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from boundary import RunContext
    from tests.support.celery_tools import runs_of

    # Given a checkpointed graph whose tool step died after submitting its calls
    run = RunContext(run_id=f"lg-resume-{uuid.uuid4().hex[:12]}", authorized_tools={"counted"})
    handle = celery_boundary.for_run(run, timeout=30)
    log = str(tmp_path / "runs.log")
    model = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage("", tool_calls=[call("call_lg_r1", "counted", {"log": log})]),
                AIMessage("done"),
            ]
        )
    )
    checkpointer = InMemorySaver()
    config = {"configurable": {"thread_id": run.run_id}}

    def submit_then_crash(state: MessagesState) -> Any:
        for tool_call in state["messages"][-1].tool_calls:
            handle.submit(tool_call["id"], tool_call["name"], tool_call["args"])
        raise RuntimeError("the process died here")

    def build(tools: Any) -> Any:
        builder = StateGraph(MessagesState)
        builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
        builder.add_node("tools", tools)
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", tools_condition, ["tools", END])
        builder.add_edge("tools", "model")
        return builder.compile(checkpointer=checkpointer)

    with pytest.raises(RuntimeError):
        build(submit_then_crash).invoke({"messages": [("user", "go")]}, config)
    # When a fresh graph resumes from the same checkpointer, its tools made with replay
    state = build(tool_node(handle, replay=True)).invoke(None, config)
    # Then the tool step gets the first call's real result, and the tool ran once
    (answer,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert answer.tool_call_id == "call_lg_r1" and answer.status == "success"
    assert json.loads(answer.content)["result"] == {"count": 1, "first": "counted-0"}
    assert state["messages"][-1].content == "done"
    assert runs_of(log) == 1
