"""Anthropic Messages with tool-boundary, offline.

Run: ``python -m examples.frameworks.anthropic_messages``.

The real ``anthropic`` client talks to a scripted model (recorded response JSON over a mock
HTTP transport). Each ``tool_use`` block is answered by a ``tool_result`` block under its id;
the call the run may not make comes back with ``is_error: true`` and its stable code only.
"""

from __future__ import annotations

import sys

import anthropic

from boundary.adapters.anthropic import anthropic_tools, tool_results  # glue
from examples.frameworks._offline import (
    QUESTION,
    ScriptedProvider,
    example_run,
    offline_boundary,
    show,
)


def message(content: list[dict[str, object]], stop_reason: str) -> dict[str, object]:
    """A Messages API body as the API returns it."""
    return {
        "id": "msg_offline",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }


def tool_use(use_id: str, name: str, tool_input: dict[str, object]) -> dict[str, object]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": tool_input}


MODEL = ScriptedProvider(
    message(
        [
            {"type": "text", "text": "Let me check the runbooks and the incidents."},
            tool_use("toolu_01Hk8Vb3Nq6Lr2Tz5Wc9Xm", "search_docs", {"query": "upstream timeout"}),
            tool_use("toolu_01Jp4Cx7Md1Sg8Fy3Qa6Rb", "delete_rows", {"table": "incidents"}),
        ],
        "tool_use",
    ),
    message([{"type": "text", "text": "The runbook blames upstream timeouts."}], "end_turn"),
)


def main() -> int:
    client = MODEL.sdk(anthropic.Anthropic, "http://model.invalid")
    with offline_boundary() as boundary:
        handle = boundary.for_run(example_run("anthropic"))  # glue
        messages: list[object] = [{"role": "user", "content": QUESTION}]
        while True:
            reply = client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=1024,
                messages=messages,
                tools=anthropic_tools(handle),  # glue
            )
            if reply.stop_reason != "tool_use":
                break
            messages += [
                {"role": "assistant", "content": reply.content},
                tool_results(handle, reply),  # glue
            ]
    results = MODEL.requests[-1]["messages"][-1]["content"]
    for block in results:
        show(block["tool_use_id"], block["content"], error=block["is_error"])
    print("answer:", reply.content[0].text)
    return 0 if [block["is_error"] for block in results] == [False, True] else 1


if __name__ == "__main__":
    sys.exit(main())
