"""OpenAI Chat Completions with tool-boundary, offline.

Run: ``python -m examples.frameworks.openai_chat``.

The real ``openai`` client talks to a scripted model (recorded response JSON over a mock HTTP
transport). The model asks for two tools in one turn; the boundary runs them on the Celery
worker and answers each ``tool_call`` with a ``role: tool`` message under its own id.
"""

from __future__ import annotations

import json
import sys

import openai

from boundary.adapters.openai import chat_tool_messages, chat_tools  # glue
from examples.frameworks._offline import (
    QUESTION,
    ScriptedProvider,
    example_run,
    offline_boundary,
    show,
)

SQL = (
    "SELECT s.name, count(*) AS incidents FROM incidents i JOIN services s ON s.id = i.service_id"
    " GROUP BY s.name ORDER BY incidents DESC LIMIT 3"
)


def completion(message: dict[str, object], finish: str) -> dict[str, object]:
    """A chat.completion body as the API returns it."""
    return {
        "id": "chatcmpl-offline",
        "object": "chat.completion",
        "created": 1764720000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def tool_call(call_id: str, name: str, arguments: dict[str, object]) -> dict[str, object]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


MODEL = ScriptedProvider(
    completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                tool_call("call_k3Jd8sPq2vX7", "search_docs", {"query": "upstream timeout"}),
                tool_call("call_m9Wq1zRt5yB4", "sql_read", {"sql": SQL}),
            ],
        },
        "tool_calls",
    ),
    completion({"role": "assistant", "content": "Timeouts come from the upstream."}, "stop"),
)


def main() -> int:
    client = MODEL.sdk(openai.OpenAI, "http://model.invalid/v1")
    with offline_boundary() as boundary:
        handle = boundary.for_run(example_run("openai-chat"))  # glue
        messages: list[object] = [{"role": "user", "content": QUESTION}]
        while True:
            reply = client.chat.completions.create(
                model="gpt-4o",
                messages=messages,
                tools=chat_tools(handle),  # glue
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                break
            messages += [message, *chat_tool_messages(handle, message)]  # glue
    for sent in MODEL.requests[-1]["messages"]:
        if sent["role"] == "tool":
            show(sent["tool_call_id"], sent["content"])
    print("answer:", message.content)
    answered = [m for m in MODEL.requests[-1]["messages"] if m["role"] == "tool"]
    return 0 if all('"READY"' in m["content"] for m in answered) and len(answered) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
