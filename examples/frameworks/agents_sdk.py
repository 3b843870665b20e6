"""OpenAI Agents SDK with tool-boundary, offline: a run resumed from its saved ``RunState``.

Run: ``python -m examples.frameworks.agents_sdk``.

A real ``Agent`` and ``Runner`` with a scripted model (the SDK's ``Model`` interface). The
registry's tools are function tools: each call runs through the boundary under the SDK's call
id, with the model's argument text exactly as sent.

The tools ask for approval, so the run pauses and its ``RunState`` is saved as a string (what
an agent service keeps between requests). A first resume approves the calls and dies right
after handing them to the boundary. A second resume from the same saved state runs the same
calls again under the same ids; the tools, made with ``replay=True``, answer with the first
calls' real results instead of ``DUPLICATE_TOOL_CALL``: each tool ran once.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import Agent, FunctionTool, Runner, RunResult, Usage, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.run_state import RunState
from agents.tool_context import ToolContext
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from boundary import RunBoundary
from boundary.adapters.agents import agent_tools  # glue
from examples.frameworks._offline import QUESTION, example_run, offline_boundary, show


def function_call(call_id: str, name: str, arguments: dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        arguments=json.dumps(arguments),
        call_id=call_id,
        name=name,
        type="function_call",
        id=f"fc_{call_id}",
        status="completed",
    )


class ScriptedModel(Model):
    """Two calls in the first turn, then the answer."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        input_items = kwargs.get("input", args[1] if len(args) > 1 else [])
        if not any(
            isinstance(i, dict) and i.get("type") == "function_call_output" for i in input_items
        ):
            output: list[Any] = [
                function_call("call_ag_Logs4", "search_logs", {"query": "timeout"}),
                function_call("call_ag_Docs9", "search_docs", {"query": "upstream timeout"}),
            ]
        else:
            text = ResponseOutputText(
                text="The api service times out upstream.", type="output_text", annotations=[]
            )
            output = [
                ResponseOutputMessage(
                    id="msg_1", content=[text], role="assistant", status="completed", type="message"
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Crashed(Exception):
    """Stands for the process dying: nothing after this point was saved."""


def approval_first(tools: list[FunctionTool]) -> list[FunctionTool]:
    """The run pauses for approval before its tools run: a point to save its state."""
    for tool in tools:
        tool.needs_approval = True
    return tools


def submit_then_crash(handle: RunBoundary, tools: list[FunctionTool]) -> list[FunctionTool]:
    """The first resume's tools: each hands its call to the boundary (a worker runs it), then
    the process dies before the output reaches the run."""

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        handle.submit(ctx.tool_call_id, ctx.tool_name, arguments)
        raise Crashed

    for tool in tools:
        tool.on_invoke_tool = invoke
    return tools


async def approve_and_run(agent: Agent[Any], saved: str) -> RunResult:
    state = await RunState.from_string(agent, saved)
    for item in state.get_interruptions():
        state.approve(item)
    return await Runner.run(agent, state)


async def run() -> int:
    with offline_boundary() as boundary:
        handle = boundary.for_run(example_run("agents-sdk"))  # glue
        tools = approval_first(agent_tools(handle, replay=True))  # glue
        agent = Agent(name="support", model=ScriptedModel(), tools=tools)  # glue
        saved = (await Runner.run(agent, QUESTION)).to_state().to_string()
        dying = submit_then_crash(handle, approval_first(agent_tools(handle)))
        try:
            await approve_and_run(Agent(name="support", model=ScriptedModel(), tools=dying), saved)
        except Exception:  # the SDK wraps the tool's exception
            print("crashed after submitting the tool calls; resuming from the saved RunState")
        result = await approve_and_run(agent, saved)
        summary = boundary.store.run_summary(handle.run_id)
    sent = [i for i in result.to_input_list() if i.get("type") == "function_call_output"]
    for item in sent:
        show(item["call_id"], item["output"])
    calls = summary.calls if summary is not None else 0
    print(f"calls recorded for the run: {calls} (each tool ran once)")
    print("answer:", result.final_output)
    ready = len(sent) == 2 and all('"READY"' in str(i["output"]) for i in sent)
    return 0 if ready and calls == 2 else 1


def main() -> int:
    set_tracing_disabled(True)  # offline: no trace export
    return asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())
