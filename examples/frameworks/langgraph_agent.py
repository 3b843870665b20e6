"""LangGraph with tool-boundary, offline.

Run: ``python -m examples.frameworks.langgraph_agent``.

A real LangGraph graph (model -> ToolNode -> model) driven by LangChain's fake chat model. The
``ToolNode`` holds the registry's tools as LangChain tools: each call runs through the boundary
under the model's tool_call id and comes back as a ``ToolMessage`` (``status="error"`` for an
ERROR outcome; the artifact references the canonical record, never the raw response).
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from examples.frameworks._offline import QUESTION, example_run, offline_boundary, show
from tasks.adapters.langchain import langchain_tools  # glue

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


def build(model: GenericFakeChatModel, tools: list[Any]) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode(tools))  # glue
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile()


def main() -> int:
    with offline_boundary() as boundary:
        handle = boundary.for_run(example_run("langgraph"))  # glue
        tools = langchain_tools(handle)  # glue
        model = GenericFakeChatModel(messages=iter(SCRIPT))  # a real model: .bind_tools(tools)
        state = build(model, tools).invoke({"messages": [("user", QUESTION)]})
    answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    for message in answers:
        show(message.tool_call_id, f"[{message.status}] {message.content}")
    print("answer:", state["messages"][-1].content)
    return 0 if len(answers) == 2 and all(m.status == "success" for m in answers) else 1


if __name__ == "__main__":
    sys.exit(main())
