"""Adapters from agent frameworks' tool calls to the boundary, one module per framework.

Each module imports its framework's SDK only when its tools are made or called, never at import
(and the OpenAI and Anthropic ones need no SDK at all: they read the SDK's objects or plain
dicts), so ``pip install tool-boundary`` without extras still works and importing
``boundary.adapters.*`` loads no SDK. They import only ``boundary``, never Celery or ``tasks``.

Every adapter takes a ``RunBoundary`` (``boundary.for_run(run)``), exports the registry's
declarations (name, description, ``input_schema``) in the framework's format, and answers each
tool call under the framework's own tool_call_id, byte for byte, with the framework's error
convention.

| module | framework | extra |
|---|---|---|
| ``boundary.adapters.openai`` | OpenAI Chat Completions and Responses | ``openai`` |
| ``boundary.adapters.anthropic`` | Anthropic Messages | ``anthropic`` |
| ``boundary.adapters.langchain`` | LangChain tools, LangGraph ``ToolNode`` | ``langgraph`` |
| ``boundary.adapters.pydantic_ai`` | pydantic-ai toolsets | ``pydantic-ai`` |
| ``boundary.adapters.agents`` | OpenAI Agents SDK function tools | ``openai-agents`` |
"""

from boundary.adapters._common import Call, outcome_text

__all__ = ["Call", "outcome_text"]
