"""OpenAI Agents SDK agents over ``agent_tools``, driven by a scripted ``Model`` (the SDK's
model interface), every tool call run by the real Celery worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from boundary import RunBoundary
from tests.adapters.conftest import Gate
from tests.support.celery_tools import FIND_SCHEMA, SECRET

pytest.importorskip("agents")
from agents import Agent, Runner, Usage, set_tracing_disabled
from agents.exceptions import ModelBehaviorError
from agents.items import ModelResponse
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from boundary.adapters.agents import agent_tools

RAW_ONLY = "timeouts 0"


def function_call(call_id: str, name: str, arguments: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        arguments=arguments,
        call_id=call_id,
        name=name,
        type="function_call",
        id=f"fc_{call_id}",
        status="completed",
    )


class ScriptedModel(Model):
    """Returns the scripted turns' function calls, then a final message; keeps its inputs."""

    def __init__(self, *turns: list[ResponseFunctionToolCall]) -> None:
        self.turns = list(turns)
        self.tools: list[Any] = []
        self.inputs: list[Any] = []

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        self.tools = list(tools)
        self.inputs.append(json.dumps(input, default=str))
        if self.turns:
            output: list[Any] = list(self.turns.pop(0))
        else:
            text = ResponseOutputText(text="done", type="output_text", annotations=[])
            output = [
                ResponseOutputMessage(
                    id="msg_1", content=[text], role="assistant", status="completed", type="message"
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@pytest.fixture(autouse=True)
def offline() -> None:
    set_tracing_disabled(True)


def outputs(result: Any) -> dict[str, Any]:
    return {
        item["call_id"]: json.loads(item["output"])
        for item in result.to_input_list()
        if item.get("type") == "function_call_output"
    }


def test_function_tools_run_under_the_sdks_call_ids(
    handle: RunBoundary, record: Callable[[str], Any]
) -> None:
    # Given a model that calls three tools, one with a duplicate key in its argument text
    model = ScriptedModel(
        [
            function_call("call_ag_find", "find", '{"query":"timeouts"}'),
            function_call("call_ag_boom", "boom", '{"query":"x"}'),
            function_call("call_ag_dup", "find", '{"query":"a","query":"b"}'),
        ]
    )
    agent = Agent(name="support", model=model, tools=agent_tools(handle))
    # When the runner runs it
    result = Runner.run_sync(agent, "Why do requests time out?")
    # Then the model saw the registry's declaration
    find = next(t for t in model.tools if t.name == "find")
    assert find.params_json_schema == FIND_SCHEMA
    assert find.description == "Find documents about a query."
    # and each call was answered under the SDK's call id; the raw text reached preflight
    answers = outputs(result)
    assert answers["call_ag_find"]["result"] == {"count": 3, "first": "doc-0"}
    assert answers["call_ag_boom"]["error_code"] == "TOOL_EXECUTION_FAILED"
    assert answers["call_ag_dup"]["error_code"] == "INVALID_ARGUMENTS"
    assert record("call_ag_find").tool_call_id == "call_ag_find"
    assert record("call_ag_dup") is None
    shown = "".join(model.inputs)
    assert RAW_ONLY not in shown and SECRET not in shown
    assert result.final_output == "done"


def test_a_reused_call_id_is_refused_by_the_sdk_before_the_tool(
    handle: RunBoundary, record: Callable[[str], Any]
) -> None:
    # The SDK refuses a completed call id reused for other arguments before any tool runs:
    # the boundary never sees it, and the first record stays as it was.
    model = ScriptedModel(
        [function_call("call_ag_once", "find", '{"query":"timeouts"}')],
        [function_call("call_ag_once", "find", '{"query":"again"}')],
    )
    agent = Agent(name="support", model=model, tools=agent_tools(handle))

    with pytest.raises(ModelBehaviorError):
        Runner.run_sync(agent, "go")

    assert json.loads(record("call_ag_once").request) == {"query": "timeouts"}


def test_a_repeated_id_reaching_the_tool_is_refused_by_the_boundary(handle: RunBoundary) -> None:
    from agents.tool_context import ToolContext

    find = next(t for t in agent_tools(handle) if t.name == "find")

    def context(arguments: str) -> ToolContext[Any]:
        return ToolContext(
            context=None, tool_name="find", tool_call_id="call_ag_x", tool_arguments=arguments
        )

    async def twice() -> list[Any]:
        first = await find.on_invoke_tool(context('{"query":"a"}'), '{"query":"a"}')
        second = await find.on_invoke_tool(context('{"query":"b"}'), '{"query":"b"}')
        return [json.loads(first), json.loads(second)]

    first, second = asyncio.run(twice())

    assert first["status"] == "READY"
    assert second["error_code"] == "DUPLICATE_TOOL_CALL_CONFLICT"


def test_async_run_leaves_the_event_loop_free(handle: RunBoundary, gate: Gate) -> None:
    model = ScriptedModel([function_call("call_ag_gate", "gate", "{}")])
    agent = Agent(name="support", model=model, tools=agent_tools(handle))

    async def main() -> Any:
        result, _ = await asyncio.gather(Runner.run(agent, "go"), gate.opener())
        return result

    result = asyncio.run(main())

    assert outputs(result)["call_ag_gate"]["result"]["first"] == "opened"
