"""Anthropic Messages through the real ``anthropic`` client over a mock HTTP transport answering
with recorded JSON, every tool call run by the real Celery worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from boundary import RunBoundary
from boundary.adapters.anthropic import anthropic_tools, atool_results, tool_results
from tests.adapters.conftest import Gate, ScriptedHTTP, recorded
from tests.support.celery_tools import FIND_SCHEMA, SECRET, SECRET_URL

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

USE_FIND = "toolu_01A09q90qw90lq917835lq9"
USE_BOOM = "toolu_01Bq8RzL2mN4pK6sT9vW3xYz"
USE_BAD = "toolu_01Cw5TgH7jK9lM1nB3vC5xZa"
RAW_ONLY = "timeouts 0"
BASE_URL = "http://anthropic.test"


def results(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every tool_result the model was sent, by tool_use_id."""
    found = {}
    for message in messages:
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block.get("type") == "tool_result":
                found[block["tool_use_id"]] = block
    return found


def test_tool_uses_get_results_under_their_ids_with_is_error(
    handle: RunBoundary, record: Callable[[str], Any]
) -> None:
    # Given a model that uses three tools, then one id again, then answers
    http = ScriptedHTTP(
        recorded("anthropic_tool_use.json"),
        recorded("anthropic_repeat.json"),
        recorded("anthropic_final.json"),
    )
    llm = http.sdk(anthropic.Anthropic, BASE_URL)
    messages: list[Any] = [{"role": "user", "content": "Why do requests time out?"}]
    # When the agent loop runs with the adapter's glue
    tools = anthropic_tools(handle)
    while True:
        reply = llm.messages.create(
            model="claude-sonnet-4-5", max_tokens=1024, messages=messages, tools=tools
        )
        if reply.stop_reason != "tool_use":
            break
        messages += [{"role": "assistant", "content": reply.content}, tool_results(handle, reply)]
    # Then the model saw the registry's declarations
    find = next(t for t in http.requests[0]["tools"] if t["name"] == "find")
    assert find == {
        "name": "find",
        "description": "Find documents about a query.",
        "input_schema": FIND_SCHEMA,
    }
    # and one tool_result per tool_use, is_error set for the ERROR outcomes only
    sent = results(http.requests[1]["messages"])
    assert sent[USE_FIND]["is_error"] is False
    assert json.loads(sent[USE_FIND]["content"])["result"] == {"count": 3, "first": "doc-0"}
    assert sent[USE_BOOM]["is_error"] is True
    assert json.loads(sent[USE_BOOM]["content"]) == {
        "status": "ERROR",
        "error_code": "TOOL_EXECUTION_FAILED",
        "message": "The tool failed while running.",
    }
    assert sent[USE_BAD]["is_error"] is True
    assert json.loads(sent[USE_BAD]["content"])["error_path"] == "/additionalProperties"
    # and the repeated id was refused, the first record untouched
    repeated = results(http.requests[2]["messages"])
    assert json.loads(repeated[USE_FIND]["content"])["error_code"] == "DUPLICATE_TOOL_CALL_CONFLICT"
    stored = record(USE_FIND)
    assert stored.tool_call_id == USE_FIND
    assert json.loads(stored.request) == {"query": "timeouts"}
    shown = json.dumps(http.requests)
    assert RAW_ONLY not in shown
    assert SECRET not in shown and SECRET_URL not in shown
    assert reply.content[0].text.startswith("Three documents")


def test_async_tool_results_leave_the_event_loop_free(handle: RunBoundary, gate: Gate) -> None:
    http = ScriptedHTTP(recorded("anthropic_gate.json"))
    llm = http.sdk(anthropic.AsyncAnthropic, BASE_URL)

    async def turn() -> dict[str, Any]:
        reply = await llm.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=256,
            messages=[{"role": "user", "content": "go"}],
            tools=anthropic_tools(handle),
        )
        message, _ = await asyncio.gather(atool_results(handle, reply), gate.opener())
        return message

    message = asyncio.run(turn())

    block = message["content"][0]
    assert block["tool_use_id"] == "toolu_01Dg6UhJ8kL0mN2bV4cX6zQw"
    assert json.loads(block["content"])["result"]["first"] == "opened"
