"""pydantic-ai with tool-boundary, offline.

Run: ``python -m examples.frameworks.pydantic_ai_agent``.

A real pydantic-ai ``Agent`` driven by its ``FunctionModel`` (a scripted model). The registry is
one toolset: each call runs through the boundary under ``ctx.tool_call_id``; arguments that fail
the tool's schema come back as a retry prompt (``ModelRetry``), other errors as a terminal
failure (``ToolFailed``).
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from boundary.adapters.pydantic_ai import BoundaryToolset  # glue
from examples.frameworks._offline import QUESTION, example_run, offline_boundary, show


def scripted_model(messages: list[Any], info: AgentInfo) -> ModelResponse:
    """First turn: two calls, one with a limit over the schema's maximum; second: a fixed
    call; then the answer."""
    turn = sum(1 for m in messages if isinstance(m, ModelResponse))
    if turn == 0:
        return ModelResponse(
            parts=[
                ToolCallPart("search_logs", {"query": "timeout", "level": "ERROR"}, "pyd_logs_1"),
                ToolCallPart(
                    "search_docs", {"query": "upstream timeout", "limit": 99}, "pyd_docs_1"
                ),
            ]
        )
    if turn == 1:
        return ModelResponse(
            parts=[
                ToolCallPart("search_docs", {"query": "upstream timeout", "limit": 3}, "pyd_docs_2")
            ]
        )
    return ModelResponse(parts=[TextPart("The api service logs upstream timeouts.")])


def main() -> int:
    with offline_boundary() as boundary:
        handle = boundary.for_run(example_run("pydantic-ai"))  # glue
        agent = Agent(FunctionModel(scripted_model), toolsets=[BoundaryToolset(handle)])  # glue
        result = agent.run_sync(QUESTION)
    answers = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    for part in answers:
        show(part.tool_call_id, f"[{part.outcome}] {part.content}")
    print("answer:", result.output)
    outcomes = [part.outcome for part in answers]
    return 0 if outcomes == ["success", "retried", "success"] else 1


if __name__ == "__main__":
    sys.exit(main())
