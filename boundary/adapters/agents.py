"""The OpenAI Agents SDK: the registry as ``FunctionTool``s whose every call runs through the
boundary under the SDK's ``ToolContext.tool_call_id``, with the model's raw argument text.

Glue::

    agent = Agent(name=..., model=..., tools=agent_tools(boundary.for_run(run)))

A run resumed from a saved ``RunState`` makes its pending calls again under the same ids:
``agent_tools(handle, replay=True)`` answers them with the first calls' outputs.

The SDK invokes tools asynchronously only (``Runner.run_sync`` drives the same loop); the call
waits off the event loop. The raw argument text (``ToolContext.tool_arguments``) goes to the
boundary as is, so duplicate keys or NaN are refused there, not silently parsed. A function
output has no error flag: an ERROR outcome reads as JSON with ``"status": "ERROR"`` and its
code. Requires ``openai-agents`` (``pip install tool-boundary[openai-agents]``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from boundary.adapters._common import Call, arun_calls, outcome_text
from boundary.adapters._gather import gathered_call
from boundary.handle import RunBoundary

if TYPE_CHECKING:
    from agents import FunctionTool
    from agents.tool_context import ToolContext


def agent_tools(handle: RunBoundary, *, replay: bool = False) -> list[FunctionTool]:
    """The run's tools as Agents SDK function tools (schemas as declared, not ``strict``).

    ``replay=True``: a call already made under its ``tool_call_id`` with the same tool and
    arguments (a run resumed from a saved ``RunState``) gets the first call's output; the
    tool is not run again."""
    # The SDK is imported when its tools are made, not with this module (boundary/ imports
    # no agent SDK at import time: tests/unit/test_layering.py).
    from agents import FunctionTool

    return [
        FunctionTool(
            name=spec.name,
            description=spec.description,
            params_json_schema=spec.arguments_schema,
            on_invoke_tool=_invoker(handle, spec.name, replay),
            strict_json_schema=False,
        )
        for spec in handle.tools()
    ]


def _invoker(
    handle: RunBoundary, name: str, replay: bool
) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        call = Call(ctx.tool_call_id, name, arguments)
        if replay:
            return outcome_text((await arun_calls(handle, [call], replay=replay))[0])
        # The SDK starts a turn's parallel calls together: they go as one turn.
        return outcome_text(await gathered_call(handle, call))

    return invoke
