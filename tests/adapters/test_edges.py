"""What every adapter does at the edges, shown on the SDK-free ones with plain dicts: a wait
that runs out answers instead of raising, an id the safe-id rule refuses is echoed (so the
conversation stays valid) but never recorded, and a turn's calls run side by side."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis

from boundary import RunBoundary, RunContext, ToolBoundary
from boundary.adapters.anthropic import tool_results
from boundary.adapters.openai import chat_tool_messages
from tests.support import celery_tools


def chat_message(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }


def test_a_call_outliving_the_wait_is_answered_as_still_running(
    celery_boundary: ToolBoundary, record: Callable[[str], Any]
) -> None:
    # Given a run allowed a tool that sleeps past the adapter's wait
    run = RunContext(run_id="adapters-edge-slow", authorized_tools=frozenset({"sleepy"}))
    handle = celery_boundary.for_run(run)
    message = {"content": [{"type": "tool_use", "id": "toolu_slow", "name": "sleepy", "input": {}}]}
    # When the adapter waits less than the tool runs
    reply = tool_results(handle, message, timeout=0.2)
    # Then the model is told the call is still running (not an error), and the call goes on
    (block,) = reply["content"]
    assert block["tool_use_id"] == "toolu_slow"
    assert block["is_error"] is False
    assert json.loads(block["content"])["status"] == "PROJECTING"
    assert handle.outcome("toolu_slow", timeout=30).status == "READY"


def test_an_id_the_safe_id_rule_refuses_is_echoed_but_never_recorded(
    handle: RunBoundary, redis_client: redis.Redis
) -> None:
    # Some providers send ids like Kimi K2's ``functions.find:0``: a colon is not safe.
    unsafe = "functions.find:0"
    too_long = "call_" + "x" * 130

    messages = chat_tool_messages(
        handle,
        chat_message((unsafe, "find", {"query": "a"}), (too_long, "find", {"query": "b"})),
    )

    assert [m["tool_call_id"] for m in messages] == [unsafe, too_long]
    for sent in messages:
        assert json.loads(sent["content"])["error_code"] == "INVALID_TOOL_CALL_ID"
    assert list(redis_client.scan_iter(match=f"tb:{{{handle.run_id}}}:*")) == []


def test_a_turns_calls_run_side_by_side(handle: RunBoundary) -> None:
    # Given three calls of a tool that returns only once all three are running
    celery_tools.TOGETHER.reset()
    calls = [(f"call_par_{n}", "together", {}) for n in range(3)]
    # When one turn hands them over
    messages = chat_tool_messages(handle, chat_message(*calls))
    # Then all three ran at once (one after the other, the first would break the barrier)
    assert [json.loads(m["content"])["status"] for m in messages] == ["READY"] * 3
