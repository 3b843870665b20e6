"""Deprecated: moved to ``boundary.adapters.openai``; import it from there. This path keeps
working for one release (the same objects)."""

from boundary.adapters.openai import (
    achat_tool_messages,
    afunction_call_outputs,
    chat_tool_messages,
    chat_tools,
    function_call_outputs,
    response_tools,
)

__all__ = [
    "achat_tool_messages",
    "afunction_call_outputs",
    "chat_tool_messages",
    "chat_tools",
    "function_call_outputs",
    "response_tools",
]
