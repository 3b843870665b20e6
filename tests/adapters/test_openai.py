"""OpenAI Chat Completions and Responses through the real ``openai`` client over a mock HTTP
transport answering with recorded JSON, every tool call run by the real Celery worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from boundary import RunBoundary
from boundary.adapters.openai import (
    achat_tool_messages,
    chat_tool_messages,
    chat_tools,
    function_call_outputs,
    response_tools,
)
from tests.adapters.conftest import Gate, ScriptedHTTP, recorded
from tests.support.celery_tools import FIND_SCHEMA, SECRET, SECRET_URL

openai = pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

CALL_FIND = "call_Qx7fY2mBn9LwK3pZ"
CALL_BOOM = "call_Bm4sT8vWq1RzX6yD"
CALL_BAD = "call_Hn2cV5bLp7JkQ0aE"
#: Text only the raw response holds (``lookup`` returns it; its projector does not).
RAW_ONLY = "timeouts 0"
BASE_URL = "http://openai.test/v1"


def contents(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


def test_chat_tool_calls_run_once_under_their_exact_ids(
    handle: RunBoundary, record: Callable[[str], Any]
) -> None:
    # Given a model that asks for three calls, then for one of them again, then answers
    http = ScriptedHTTP(
        recorded("openai_chat_tool_calls.json"),
        recorded("openai_chat_repeat.json"),
        recorded("openai_chat_final.json"),
    )
    llm = http.sdk(openai.OpenAI, BASE_URL)
    messages: list[Any] = [{"role": "user", "content": "Why do requests time out?"}]
    # When the agent loop runs with the adapter's glue
    tools = chat_tools(handle)
    while True:
        reply = llm.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        message = reply.choices[0].message
        if not message.tool_calls:
            break
        messages += [message, *chat_tool_messages(handle, message)]
    # Then the model was shown the registry's declaration of each tool
    find = next(t for t in http.requests[0]["tools"] if t["function"]["name"] == "find")
    assert find["function"]["description"] == "Find documents about a query."
    assert find["function"]["parameters"] == FIND_SCHEMA
    # and answered under each call's own id: the bounded result, a safe error, a schema path
    answers = contents(http.requests[1]["messages"])
    assert answers[CALL_FIND] == {
        "status": "READY",
        "evidence_status": "EVIDENCE_FOUND",
        "result": {"count": 3, "first": "doc-0"},
        "scope": {"query": "timeouts"},
    }
    assert answers[CALL_BOOM] == {
        "status": "ERROR",
        "error_code": "TOOL_EXECUTION_FAILED",
        "message": "The tool failed while running.",
    }
    assert answers[CALL_BAD]["error_code"] == "INVALID_ARGUMENTS"
    assert answers[CALL_BAD]["error_path"] == "/properties/query/minLength"
    # and the repeated id was refused without running the tool again
    assert contents(http.requests[2]["messages"])[CALL_FIND]["error_code"] == (
        "DUPLICATE_TOOL_CALL_CONFLICT"
    )
    stored = record(CALL_FIND)
    assert stored.tool_call_id == CALL_FIND
    assert json.loads(stored.request) == {"query": "timeouts"}
    assert RAW_ONLY in stored.raw
    assert record(CALL_BAD) is None
    # and nothing raw or secret ever reached the model
    shown = json.dumps(http.requests)
    assert RAW_ONLY not in shown
    assert SECRET not in shown and SECRET_URL not in shown
    assert reply.choices[0].message.content.startswith("Three documents")


def test_async_chat_leaves_the_event_loop_free(handle: RunBoundary, gate: Gate) -> None:
    # Given a tool that waits until the event loop opens its gate
    http = ScriptedHTTP(recorded("openai_chat_gate.json"))
    llm = http.sdk(openai.AsyncOpenAI, BASE_URL)

    async def turn() -> list[dict[str, Any]]:
        reply = await llm.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "go"}], tools=chat_tools(handle)
        )
        answers, _ = await asyncio.gather(
            achat_tool_messages(handle, reply.choices[0].message), gate.opener()
        )
        return answers

    # When the calls run under the async adapter
    answers = asyncio.run(turn())
    # Then the loop ran the opener while the tool waited (a blocked loop leaves it shut)
    assert contents(answers)["call_Gt5hY7uJ9kL1zX3c"]["result"]["first"] == "opened"


def test_responses_function_calls_get_outputs_under_their_call_ids(
    handle: RunBoundary, record: Callable[[str], Any]
) -> None:
    http = ScriptedHTTP(
        recorded("openai_responses_function_calls.json"), recorded("openai_responses_final.json")
    )
    llm = http.sdk(openai.OpenAI, BASE_URL)
    items: list[Any] = [{"role": "user", "content": "Why do requests time out?"}]
    tools = response_tools(handle)

    response = llm.responses.create(model="gpt-4.1", input=items, tools=tools)
    items += [*response.output, *function_call_outputs(handle, response)]
    final = llm.responses.create(model="gpt-4.1", input=items, tools=tools)

    find = next(t for t in http.requests[0]["tools"] if t["name"] == "find")
    assert find["parameters"] == FIND_SCHEMA
    outputs = {
        item["call_id"]: json.loads(item["output"])
        for item in http.requests[1]["input"]
        if item.get("type") == "function_call_output"
    }
    assert outputs["call_Rz8kP2wQ4vN6mT1s"]["result"] == {"count": 3, "first": "doc-0"}
    assert outputs["call_Ew3dR5tY7uI9oP0a"]["error_code"] == "TOOL_EXECUTION_FAILED"
    assert record("call_Rz8kP2wQ4vN6mT1s").tool_call_id == "call_Rz8kP2wQ4vN6mT1s"
    assert RAW_ONLY not in json.dumps(http.requests)
    assert final.output_text == "doc-0 is about timeouts."
