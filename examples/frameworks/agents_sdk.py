"""OpenAI Agents SDK with tool-boundary, offline.

Run: ``python -m examples.frameworks.agents_sdk``.

A real ``Agent`` and ``Runner`` with a scripted model (the SDK's ``Model`` interface). The
registry's tools are function tools: each call runs through the boundary under the SDK's call
id, with the model's argument text exactly as sent.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agents import Agent, Runner, Usage, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from examples.frameworks._offline import QUESTION, example_run, offline_boundary, show
from tasks.adapters.agents import agent_tools  # glue


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


def main() -> int:
    set_tracing_disabled(True)  # offline: no trace export
    with offline_boundary() as boundary:
        handle = boundary.for_run(example_run("agents-sdk"))  # glue
        agent = Agent(name="support", model=ScriptedModel(), tools=agent_tools(handle))  # glue
        result = Runner.run_sync(agent, QUESTION)
    sent = [i for i in result.to_input_list() if i.get("type") == "function_call_output"]
    for item in sent:
        show(item["call_id"], item["output"])
    print("answer:", result.final_output)
    return 0 if len(sent) == 2 and all('"READY"' in str(i["output"]) for i in sent) else 1


if __name__ == "__main__":
    sys.exit(main())
