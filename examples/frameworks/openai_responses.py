"""OpenAI Responses with tool-boundary, offline.

Run: ``python -m examples.frameworks.openai_responses``.

The real ``openai`` client talks to a scripted model (recorded response JSON over a mock HTTP
transport). Each ``function_call`` item is answered by a ``function_call_output`` item under
its ``call_id``.
"""

from __future__ import annotations

import sys

import openai

from boundary.adapters.openai import function_call_outputs, response_tools  # glue
from examples.frameworks._offline import (
    QUESTION,
    ScriptedProvider,
    example_run,
    offline_boundary,
    show,
)


def response(output: list[dict[str, object]]) -> dict[str, object]:
    """A Responses API body as the API returns it."""
    return {
        "id": "resp_offline",
        "object": "response",
        "created_at": 1764720000,
        "status": "completed",
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
    }


def function_call(call_id: str, name: str, arguments: str) -> dict[str, object]:
    item_id = "fc_" + call_id.removeprefix("call_")
    return {"id": item_id, "type": "function_call", "status": "completed",
            "call_id": call_id, "name": name, "arguments": arguments}  # fmt: skip


MODEL = ScriptedProvider(
    response(
        [
            function_call(
                "call_Tq4Lm8Zx2Vb6", "search_logs", '{"query":"timeout","level":"ERROR"}'
            ),
            function_call("call_Ye7Hn3Kc9Wd1", "search_docs", '{"query":"upstream timeout"}'),
        ]
    ),
    response(
        [
            {
                "id": "msg_offline",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": "The api service times out upstream.",
                        "annotations": [],
                    }
                ],
            }
        ]
    ),
)


def main() -> int:
    client = MODEL.sdk(openai.OpenAI, "http://model.invalid/v1")
    with offline_boundary() as boundary:
        handle = boundary.for_run(example_run("openai-responses"))  # glue
        items: list[object] = [{"role": "user", "content": QUESTION}]
        while True:
            reply = client.responses.create(
                model="gpt-4.1",
                input=items,
                tools=response_tools(handle),  # glue
            )
            if not any(item.type == "function_call" for item in reply.output):
                break
            items += [*reply.output, *function_call_outputs(handle, reply)]  # glue
    sent = [i for i in MODEL.requests[-1]["input"] if i.get("type") == "function_call_output"]
    for item in sent:
        show(item["call_id"], item["output"])
    print("answer:", reply.output_text)
    return 0 if len(sent) == 2 and all('"READY"' in i["output"] for i in sent) else 1


if __name__ == "__main__":
    sys.exit(main())
