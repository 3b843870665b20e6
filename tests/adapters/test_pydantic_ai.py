"""pydantic-ai agents over ``BoundaryToolset``, driven by pydantic-ai's ``FunctionModel`` and
``TestModel``, every tool call run by the real Celery worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from boundary import ErrorCode, RunBoundary, ToolOutcome
from tests.adapters.conftest import Gate
from tests.support.celery_tools import FIND_SCHEMA, SECRET

pytest.importorskip("pydantic_ai")
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from boundary.adapters.pydantic_ai import BoundaryToolset, answer

RAW_ONLY = "timeouts 0"


def scripted(*turns: list[ToolCallPart]) -> tuple[FunctionModel, list[AgentInfo]]:
    """A model that makes the given calls turn by turn, then answers; keeps what it was
    offered."""
    seen: list[AgentInfo] = []

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        if len(seen) <= len(turns):
            return ModelResponse(parts=list(turns[len(seen) - 1]))
        return ModelResponse(parts=[TextPart("Three documents mention timeouts.")])

    return FunctionModel(respond), seen


def returns(messages: list[Any]) -> list[ToolReturnPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def test_calls_run_under_ctx_tool_call_id_with_retry_and_failure_mapped(
    handle: RunBoundary, record: Callable[[str], Any]
) -> None:
    # Given a model that calls three tools, then repeats an id, then answers
    model, seen = scripted(
        [
            ToolCallPart("find", {"query": "timeouts"}, tool_call_id="pyd_find-a1"),
            ToolCallPart("boom", {"query": "x"}, tool_call_id="pyd_boom-b2"),
            ToolCallPart("find", '{"query": 7}', tool_call_id="pyd_bad-c3"),
        ],
        [ToolCallPart("find", {"query": "again"}, tool_call_id="pyd_find-a1")],
    )
    agent = Agent(model, toolsets=[BoundaryToolset(handle)])
    # When the agent runs
    result = agent.run_sync("Why do requests time out?")
    # Then the model was offered the registry's declaration
    find = next(t for t in seen[0].function_tools if t.name == "find")
    assert find.description == "Find documents about a query."
    assert find.parameters_json_schema == FIND_SCHEMA
    # and every call was answered under its own id, errors mapped deliberately
    parts = {(p.tool_call_id, p.outcome): p for p in returns(result.all_messages())}
    ready = json.loads(parts["pyd_find-a1", "success"].content)
    assert ready["result"] == {"count": 3, "first": "doc-0"}
    failed = json.loads(parts["pyd_boom-b2", "failed"].content)
    assert failed["error_code"] == "TOOL_EXECUTION_FAILED"
    retried = json.loads(parts["pyd_bad-c3", "retried"].content)
    assert retried["error_path"] == "/properties/query/type"
    repeated = json.loads(parts["pyd_find-a1", "failed"].content)
    assert repeated["error_code"] == "DUPLICATE_TOOL_CALL_CONFLICT"
    # and the first record is untouched, nothing raw or secret reached the model
    assert json.loads(record("pyd_find-a1").request) == {"query": "timeouts"}
    shown = result.all_messages_json().decode()
    assert RAW_ONLY not in shown and SECRET not in shown
    assert result.output == "Three documents mention timeouts."


def test_test_model_calls_every_tool_with_schema_valid_arguments(handle: RunBoundary) -> None:
    # TestModel calls each tool once with arguments generated from its schema.
    agent = Agent(TestModel(call_tools=["find"]), toolsets=[BoundaryToolset(handle)])

    result = agent.run_sync("go")

    (answer,) = returns(result.all_messages())
    assert answer.outcome == "success"
    assert json.loads(answer.content)["status"] == "READY"


def test_async_run_leaves_the_event_loop_free(handle: RunBoundary, gate: Gate) -> None:
    model, _ = scripted([ToolCallPart("gate", {}, tool_call_id="pyd_gate")])
    agent = Agent(model, toolsets=[BoundaryToolset(handle)])

    async def main() -> Any:
        result, _ = await asyncio.gather(agent.run("go"), gate.opener())
        return result

    result = asyncio.run(main())

    (answer,) = returns(result.all_messages())
    assert json.loads(answer.content)["result"]["first"] == "opened"


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_error_code_is_mapped_to_a_retry_or_a_terminal_failure(code: ErrorCode) -> None:
    # A new call may succeed after bad arguments or a retryable failure: ModelRetry.
    expected = ModelRetry if code is ErrorCode.INVALID_ARGUMENTS or code.retryable else ToolFailed

    with pytest.raises(expected) as raised:
        answer(ToolOutcome.error("pyd_1", code))

    assert json.loads(raised.value.message) == {
        "status": "ERROR",
        "error_code": code.value,
        "message": code.message,
    }


def test_a_call_still_running_is_answered_not_raised() -> None:
    assert json.loads(answer(ToolOutcome.running("pyd_1")))["status"] == "PROJECTING"
