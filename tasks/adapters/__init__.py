"""Adapters from agent frameworks' tool calls to the boundary, one module per framework.

Each module imports its framework's SDK only inside itself (and the OpenAI and Anthropic ones
need no SDK at all: they read the SDK's objects or plain dicts), so ``pip install
tool-boundary`` without extras still works. Every adapter takes a ``RunBoundary``
(``boundary.for_run(run)``), exports the registry's declarations (name, description,
``input_schema``) in the framework's format, and answers each tool call under the framework's
own tool_call_id, byte for byte, with the framework's error convention.

| module | framework | extra |
|---|---|---|
| ``tasks.adapters.openai`` | OpenAI Chat Completions and Responses | ``openai`` |
| ``tasks.adapters.anthropic`` | Anthropic Messages | ``anthropic`` |
| ``tasks.adapters.langchain`` | LangChain tools, LangGraph ``ToolNode`` | ``langgraph`` |
| ``tasks.adapters.pydantic_ai`` | pydantic-ai toolsets | ``pydantic-ai`` |
| ``tasks.adapters.agents`` | OpenAI Agents SDK function tools | ``openai-agents`` |
"""

from tasks.adapters._common import Call, outcome_text

__all__ = ["Call", "outcome_text"]
