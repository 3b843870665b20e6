"""Anthropic Messages: tool definitions from the registry, and ``tool_use`` blocks answered by
``tool_result`` blocks under their own ids, ``is_error`` set for an ERROR outcome.

No import of ``anthropic`` is needed: these functions read the SDK's objects (or the same
shapes as plain dicts) and return plain dicts the SDK accepts. Glue::

    handle = boundary.for_run(run)
    reply = client.messages.create(..., tools=anthropic_tools(handle))
    messages += [{"role": "assistant", "content": reply.content}, tool_results(handle, reply)]
"""

from __future__ import annotations

from typing import Any

from boundary import RunBoundary, ToolOutcome
from boundary.adapters._common import Call, arun_calls, field, outcome_text, run_calls


def anthropic_tools(handle: RunBoundary) -> list[dict[str, Any]]:
    """The run's tools as Messages ``tools``."""
    return [
        {"name": spec.name, "description": spec.description, "input_schema": spec.arguments_schema}
        for spec in handle.tools()
    ]


def _tool_uses(message: Any) -> list[Call]:
    content = field(message, "content") if not isinstance(message, list) else message
    return [
        Call(field(block, "id"), field(block, "name"), field(block, "input"))
        for block in content or ()
        if field(block, "type") == "tool_use"
    ]


def _results(calls: list[Call], outcomes: list[ToolOutcome]) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": call.tool_call_id,
                "content": outcome_text(outcome),
                "is_error": outcome.is_error,
            }
            for call, outcome in zip(calls, outcomes, strict=True)
        ],
    }


def tool_results(
    handle: RunBoundary, message: Any, *, timeout: float | None = None, replay: bool = False
) -> dict[str, Any]:
    """Runs a reply's ``tool_use`` blocks (side by side) and returns the ``user`` message
    holding one ``tool_result`` per block, in order. ``replay=True``: a block already run
    (same id, tool and input; a resumed agent) gets its first result, and nothing runs twice."""
    calls = _tool_uses(message)
    return _results(calls, run_calls(handle, calls, timeout, replay=replay))


async def atool_results(
    handle: RunBoundary, message: Any, *, timeout: float | None = None, replay: bool = False
) -> dict[str, Any]:
    """``tool_results`` for an event loop (``AsyncAnthropic``)."""
    calls = _tool_uses(message)
    return _results(calls, await arun_calls(handle, calls, timeout, replay=replay))
