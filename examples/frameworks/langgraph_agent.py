"""LangGraph with tool-boundary, offline: a graph that crashes and resumes from its checkpoint.

Run: ``python -m examples.frameworks.langgraph_agent``.

A real LangGraph graph (model -> ToolNode -> model) driven by LangChain's fake chat model, with
LangGraph's in-memory checkpointer. The ``ToolNode`` holds the registry's tools as LangChain
tools: each call runs through the boundary under the model's tool_call id and comes back as a
``ToolMessage`` (``status="error"`` for an ERROR outcome; the artifact references the canonical
record, never the raw response).

The first attempt dies right after its tool calls were submitted, before the tool step was
checkpointed (a deploy, an OOM kill). A fresh graph on the same checkpointer resumes: LangGraph
runs the tool step again with the same tool_call ids, and the tools, made with
``replay=True``, answer with the first calls' real results instead of
``DUPLICATE_TOOL_CALL``. Each tool ran once and was charged to the run's budget once.
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from boundary import RunBoundary
from boundary.adapters.langchain import langchain_tools  # glue
from examples.frameworks._offline import QUESTION, example_run, offline_boundary, show

SQL = "SELECT name, tier FROM services ORDER BY name"
SCRIPT = [
    AIMessage(
        "",
        tool_calls=[
            {"id": "call_lg_Docs7Q", "name": "search_docs", "args": {"query": "upstream timeout"}},
            {"id": "call_lg_Sql2Zx", "name": "sql_read", "args": {"sql": SQL}},
        ],
    ),
    AIMessage("The runbook explains the upstream timeouts."),
]


class Crashed(Exception):
    """Stands for the process dying: nothing after this point of the step was saved."""


def build(model: GenericFakeChatModel, tools_step: Any, checkpointer: InMemorySaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", tools_step)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def submit_then_crash(handle: RunBoundary) -> Any:
    """The first attempt's tool step: it hands the model's calls to the boundary (a worker
    runs them) and dies before any result reaches the graph's state."""

    def step(state: MessagesState) -> Any:
        for call in state["messages"][-1].tool_calls:
            handle.submit(call["id"], call["name"], call["args"])
        raise Crashed

    return step


def main() -> int:
    checkpointer = InMemorySaver()  # LangGraph's; a SqliteSaver or PostgresSaver alike
    model = GenericFakeChatModel(messages=iter(SCRIPT))  # a real model: .bind_tools(tools)
    with offline_boundary() as boundary:
        run = example_run("langgraph")
        config = {"configurable": {"thread_id": run.run_id}}
        handle = boundary.for_run(run)  # glue
        try:
            build(model, submit_then_crash(handle), checkpointer).invoke(
                {"messages": [("user", QUESTION)]}, config
            )
        except Crashed:
            print("crashed after submitting the tool calls; resuming from the checkpoint")
        tools = langchain_tools(handle, replay=True)  # glue
        resumed = build(model, ToolNode(tools), checkpointer)  # glue
        state = resumed.invoke(None, config)  # from the last checkpoint: the tool step again
        summary = boundary.store.run_summary(run.run_id)
    answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    for message in answers:
        show(message.tool_call_id, f"[{message.status}] {message.content}")
    calls = summary.calls if summary is not None else 0
    print(f"calls recorded for the run: {calls} (each tool ran once)")
    print("answer:", state["messages"][-1].content)
    ok = len(answers) == 2 and all(m.status == "success" for m in answers) and calls == 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
