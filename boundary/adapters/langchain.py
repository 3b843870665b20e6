"""LangChain tools and LangGraph's ``ToolNode``: every registry tool as a LangChain tool that,
invoked with a tool call (as ``ToolNode``, ``create_agent`` and ``tool.invoke(call)`` do), runs
through the boundary under the call's own id and returns a ``ToolMessage``.

Glue::

    tools = langchain_tools(boundary.for_run(run))
    graph.add_node("tools", ToolNode(tools))          # and model.bind_tools(tools)

With a checkpointer, make the tools with ``replay=True``: a graph resumed from its checkpoint
runs its tool node again under the same tool call ids, and each call made before gets its
first outcome instead of ``DUPLICATE_TOOL_CALL`` (the tool does not run twice).

An ERROR outcome is a ``ToolMessage`` with ``status="error"`` and only the code, its sentence and
a schema path as content. The artifact of a READY message is a reference to the canonical
record (``{"run_id", "tool_call_id"}``), never the raw response. Requires ``langchain-core``
(``pip install tool-boundary[langgraph]``), imported when the tools are made, not with this
module.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from boundary import InvocationStatus, RunBoundary, ToolOutcome
from boundary.adapters._common import Call, arun_calls, outcome_text, run_calls
from boundary.adapters._gather import gathered_call

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool


def __getattr__(name: str) -> Any:
    # ``BoundaryTool`` subclasses LangChain's ``BaseTool``: it is defined on first use, so
    # importing this module imports no agent SDK.
    if name == "BoundaryTool":
        return tool_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def tool_class() -> type[BaseTool]:
    """``BoundaryTool``, defined (and langchain-core imported) on the first call."""
    from langchain_core.messages import ToolCall, ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool
    from pydantic import ConfigDict, SkipValidation

    class BoundaryTool(BaseTool):
        """One registry tool for LangChain; the boundary checks and runs every call."""

        model_config = ConfigDict(arbitrary_types_allowed=True)

        handle: SkipValidation[RunBoundary]
        response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
        #: A call already made under its id with the same arguments (a graph resumed from its
        #: checkpoint re-runs the tool node) gets the first call's outcome, not a duplicate error.
        replay: bool = False

        def invoke(
            self,
            input: str | dict[str, Any] | ToolCall,
            config: RunnableConfig | None = None,
            **kwargs: Any,
        ) -> Any:
            """A tool call (``{"type": "tool_call", "id", "name", "args"}``) gets a ToolMessage
            under its id. Plain arguments carry no id: the boundary refuses them (it never makes
            one up) and the text of that refusal is returned."""
            call = self._call(input)
            return self._answer(call, run_calls(self.handle, [call], replay=self.replay)[0])

        async def ainvoke(
            self,
            input: str | dict[str, Any] | ToolCall,
            config: RunnableConfig | None = None,
            **kwargs: Any,
        ) -> Any:
            call = self._call(input)
            if self.replay:
                outcome = (await arun_calls(self.handle, [call], replay=True))[0]
            else:
                # ToolNode starts a turn's parallel calls together: they go as one turn.
                outcome = await gathered_call(self.handle, call)
            return self._answer(call, outcome)

        def _run(self, *args: Any, **kwargs: Any) -> Any:
            # ``tool.run(args)`` has no tool call id: refused by preflight, never made up.
            kwargs.pop("run_manager", None)
            return outcome_text(run_calls(self.handle, [Call(None, self.name, kwargs)])[0])

        def _call(self, value: Any) -> Call:
            if isinstance(value, Mapping) and value.get("type") == "tool_call":
                return Call(value.get("id"), self.name, value.get("args"))
            return Call(None, self.name, value)

        def _answer(self, call: Call, outcome: ToolOutcome) -> ToolMessage | str:
            text = outcome_text(outcome)
            if call.tool_call_id is None:
                return text
            ready = outcome.status is InvocationStatus.READY
            reference = {"run_id": self.handle.run_id, "tool_call_id": call.tool_call_id}
            return ToolMessage(
                content=text,
                tool_call_id=call.tool_call_id,
                name=self.name,
                status="error" if outcome.is_error else "success",
                artifact=reference if ready else None,
            )

    return BoundaryTool


def langchain_tools(handle: RunBoundary, *, replay: bool = False) -> list[BaseTool]:
    """The run's tools as LangChain tools (for ``bind_tools`` and ``ToolNode``).

    ``replay=True`` for a graph with a checkpointer: a resumed graph runs its tool node again
    with the same tool call ids, and each call made before gets its first outcome (the tool
    does not run twice); the same id with other arguments is still a conflict."""
    tool = tool_class()
    return [
        tool(
            name=spec.name,
            description=spec.description or spec.name,
            args_schema=spec.arguments_schema,
            handle=handle,
            replay=replay,
        )
        for spec in handle.tools()
    ]


def tool_node(handle: RunBoundary, *, replay: bool = False, **options: Any) -> Any:
    """A LangGraph ``ToolNode`` over ``langchain_tools(handle, replay=replay)``; ``options``
    go to it."""
    from langgraph.prebuilt import ToolNode

    return ToolNode(langchain_tools(handle, replay=replay), **options)
