"""OpenAI Chat Completions and Responses: tool definitions from the registry, and the answers
to a model turn's tool calls under their own ids.

No import of ``openai`` is needed: these functions read the SDK's objects (or the same shapes
as plain dicts) and return plain dicts the SDK accepts. Glue::

    handle = boundary.for_run(run)
    reply = client.chat.completions.create(..., tools=chat_tools(handle))
    messages += [reply.choices[0].message, *chat_tool_messages(handle, reply.choices[0].message)]

Chat ``role: tool`` messages have no error flag: an ERROR outcome reads as JSON with
``"status": "ERROR"`` and its ``error_code``. Responses ``function_call_output`` items have none
either, and the same text is used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from boundary.adapters._common import Call, arun_calls, field, outcome_text, run_calls
from boundary.handle import RunBoundary


def chat_tools(handle: RunBoundary) -> list[dict[str, Any]]:
    """The run's tools as Chat Completions ``tools``."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.arguments_schema,
            },
        }
        for spec in handle.tools()
    ]


def response_tools(handle: RunBoundary) -> list[dict[str, Any]]:
    """The run's tools as Responses ``tools`` (not ``strict``: the schemas are the tools' own)."""
    return [
        {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.arguments_schema,
            "strict": False,
        }
        for spec in handle.tools()
    ]


def _chat_calls(message: Any) -> list[Call]:
    calls = []
    for tool_call in field(message, "tool_calls") or ():
        function = field(tool_call, "function")
        calls.append(
            Call(field(tool_call, "id"), field(function, "name"), field(function, "arguments"))
        )
    return calls


def _chat_messages(calls: list[Call], outcomes: list[Any]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": call.tool_call_id, "content": outcome_text(outcome)}
        for call, outcome in zip(calls, outcomes, strict=True)
    ]


def chat_tool_messages(
    handle: RunBoundary, message: Any, *, timeout: float | None = None, replay: bool = False
) -> list[dict[str, Any]]:
    """Runs an assistant message's ``tool_calls`` (side by side) and returns one
    ``role: tool`` message per call, in order, each under its call's id. ``replay=True``: a
    call already run (same id, tool and arguments; a resumed agent) gets its first answer."""
    calls = _chat_calls(message)
    return _chat_messages(calls, run_calls(handle, calls, timeout, replay=replay))


async def achat_tool_messages(
    handle: RunBoundary, message: Any, *, timeout: float | None = None, replay: bool = False
) -> list[dict[str, Any]]:
    """``chat_tool_messages`` for an event loop (``AsyncOpenAI``)."""
    calls = _chat_calls(message)
    return _chat_messages(calls, await arun_calls(handle, calls, timeout, replay=replay))


def _function_calls(output: Any) -> list[Call]:
    items: Iterable[Any] = field(output, "output") if not isinstance(output, list) else output
    return [
        Call(field(item, "call_id"), field(item, "name"), field(item, "arguments"))
        for item in items or ()
        if field(item, "type") == "function_call"
    ]


def _outputs(calls: list[Call], outcomes: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call_output",
            "call_id": call.tool_call_id,
            "output": outcome_text(outcome),
        }
        for call, outcome in zip(calls, outcomes, strict=True)
    ]


def function_call_outputs(
    handle: RunBoundary, output: Any, *, timeout: float | None = None, replay: bool = False
) -> list[dict[str, Any]]:
    """Runs the ``function_call`` items of a response (or of its ``output`` list) and
    returns one ``function_call_output`` item per call, under its ``call_id`` (``replay``:
    as ``chat_tool_messages``)."""
    calls = _function_calls(output)
    return _outputs(calls, run_calls(handle, calls, timeout, replay=replay))


async def afunction_call_outputs(
    handle: RunBoundary, output: Any, *, timeout: float | None = None, replay: bool = False
) -> list[dict[str, Any]]:
    """``function_call_outputs`` for an event loop."""
    calls = _function_calls(output)
    return _outputs(calls, await arun_calls(handle, calls, timeout, replay=replay))
