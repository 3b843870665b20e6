"""Every adapter takes ``replay=``: off (the spec's default), the same call again is
``DUPLICATE_TOOL_CALL``; on (an agent resumed from a checkpoint), it is answered with the
first call's text and the tool does not run again; the same id with other arguments is a
conflict either way. Real worker thread, real Redis."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from boundary import RunBoundary, RunContext, ToolBoundary
from tests.support.celery_tools import runs_of

#: (tool_call_id, arguments, replay) -> the text the model reads.
Answer = Callable[[RunBoundary, str, dict[str, Any], bool], str]


def anthropic(handle: RunBoundary, call_id: str, args: dict[str, Any], replay: bool) -> str:
    from boundary.adapters.anthropic import tool_results

    use = {"type": "tool_use", "id": call_id, "name": "counted", "input": args}
    return str(tool_results(handle, {"content": [use]}, replay=replay)["content"][0]["content"])


def openai_chat(handle: RunBoundary, call_id: str, args: dict[str, Any], replay: bool) -> str:
    from boundary.adapters.openai import chat_tool_messages

    function = {"name": "counted", "arguments": json.dumps(args)}
    message = {"tool_calls": [{"id": call_id, "type": "function", "function": function}]}
    return str(chat_tool_messages(handle, message, replay=replay)[0]["content"])


def openai_responses(handle: RunBoundary, call_id: str, args: dict[str, Any], replay: bool) -> str:
    from boundary.adapters.openai import function_call_outputs

    item = {"type": "function_call", "call_id": call_id, "name": "counted"}
    item["arguments"] = json.dumps(args)
    return str(function_call_outputs(handle, [item], replay=replay)[0]["output"])


def langchain(handle: RunBoundary, call_id: str, args: dict[str, Any], replay: bool) -> str:
    from boundary.adapters.langchain import langchain_tools

    (tool,) = [t for t in langchain_tools(handle, replay=replay) if t.name == "counted"]
    message = tool.invoke({"type": "tool_call", "id": call_id, "name": "counted", "args": args})
    return str(message.content)


def agents_sdk(handle: RunBoundary, call_id: str, args: dict[str, Any], replay: bool) -> str:
    from agents.tool_context import ToolContext

    from boundary.adapters.agents import agent_tools

    (tool,) = [t for t in agent_tools(handle, replay=replay) if t.name == "counted"]
    text = json.dumps(args)
    context: ToolContext[Any] = ToolContext(
        context=None, tool_name="counted", tool_call_id=call_id, tool_arguments=text
    )
    return str(asyncio.run(tool.on_invoke_tool(context, text)))


def pydantic_ai(handle: RunBoundary, call_id: str, args: dict[str, Any], replay: bool) -> str:
    from pydantic_ai.exceptions import ModelRetry, ToolFailed

    from boundary.adapters.pydantic_ai import BoundaryToolset

    toolset = BoundaryToolset(handle, replay=replay)
    # ``call_tool`` reads only the context's tool_call_id.
    context: Any = SimpleNamespace(tool_call_id=call_id)
    try:
        return str(asyncio.run(toolset.call_tool("counted", args, context, None)))
    except (ModelRetry, ToolFailed) as refused:
        return str(refused.args[0])


ADAPTERS: list[Answer] = [anthropic, openai_chat, openai_responses, langchain, agents_sdk]
ADAPTERS.append(pydantic_ai)


@pytest.mark.parametrize("answer", ADAPTERS, ids=lambda a: a.__name__)
def test_an_adapter_replays_the_same_call_and_refuses_another(
    celery_boundary: ToolBoundary, tmp_path: Path, answer: Answer
) -> None:
    # Given a call answered once
    run = RunContext(run_id=f"replay-{uuid.uuid4().hex[:12]}", authorized_tools={"counted"})
    handle = celery_boundary.for_run(run, timeout=30)
    log = str(tmp_path / "runs.log")
    first = answer(handle, "call_r1", {"log": log}, False)
    assert json.loads(first)["status"] == "READY"
    # When the same call comes again, with and without replay, and another under its id
    plain = answer(handle, "call_r1", {"log": log}, False)
    replayed = answer(handle, "call_r1", {"log": log}, True)
    conflict = answer(handle, "call_r1", {"log": log, "n": 2}, True)
    # Then replay repeats the first answer, the rest are the duplicate codes, and it ran once
    assert replayed == first
    assert json.loads(plain)["error_code"] == "DUPLICATE_TOOL_CALL"
    assert json.loads(conflict)["error_code"] == "DUPLICATE_TOOL_CALL_CONFLICT"
    assert runs_of(log) == 1
