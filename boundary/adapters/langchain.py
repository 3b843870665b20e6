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
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from boundary import InvocationStatus, RunBoundary, ToolOutcome
from boundary.adapters._common import Call, arun_calls, outcome_text, run_calls
from boundary.adapters._gather import gathered_call, gathered_call_sync

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
            outcome = _handed_over(call.tool_call_id)
            if outcome is None:
                outcome = run_calls(self.handle, [call], replay=self.replay)[0]
            return self._answer(call, outcome)

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
    go to it.

    Run sync (``graph.invoke``), the node runs a model turn's calls on a thread pool, each
    on its own: unless ``options`` bring a ``wrap_tool_call`` of their own (or ``replay``),
    the node's ``wrap_tool_call`` gathers the calls of one model turn (the AI message the
    node runs) into ONE turn of the boundary (``gathered_call_sync``). Run async, the
    calls are gathered by the tools themselves (``gathered_call``)."""
    from langgraph.prebuilt import ToolNode

    if not replay and "wrap_tool_call" not in options:
        options["wrap_tool_call"] = turn_gatherer(handle, options.get("messages_key", "messages"))
        # Without an async wrapper ToolNode would run the sync one on the event loop.
        options.setdefault("awrap_tool_call", _pass_through)
    return ToolNode(langchain_tools(handle, replay=replay), **options)


async def _pass_through(request: Any, execute: Any) -> Any:
    return await execute(request)


def turn_gatherer(handle: RunBoundary, messages_key: str = "messages") -> Any:
    """A ``ToolNode`` ``wrap_tool_call`` that sends the calls of one model turn to
    ``handle``'s tools together (``gathered_call_sync``); any other call runs as it would."""
    tool = tool_class()

    def wrap(request: Any, execute: Any) -> Any:
        if not isinstance(request.tool, tool):
            return execute(request)
        own: Any = request.tool
        if own.handle is not handle or own.replay:
            return execute(request)
        call: Call = own._call(request.tool_call)
        if call.tool_call_id is None:
            return execute(request)
        expected = _turn_ids(request.state, handle, call.tool_call_id, messages_key)
        outcome = gathered_call_sync(handle, call, expected)
        # The tool answers with it on this thread (ToolNode's own handling of its answer,
        # callbacks included, stays as it is).
        _handed.outcome = (call.tool_call_id, outcome)
        try:
            return execute(request)
        finally:
            _handed.outcome = None

    return wrap


#: The outcome a ``turn_gatherer`` hands to the tool it runs next on this thread.
_handed = threading.local()


def _handed_over(tool_call_id: str | None) -> ToolOutcome | None:
    """The outcome handed over for ``tool_call_id`` on this thread, taken (once)."""
    handed = getattr(_handed, "outcome", None)
    if handed is None or tool_call_id is None or handed[0] != tool_call_id:
        return None
    _handed.outcome = None
    outcome: ToolOutcome = handed[1]
    return outcome


def _turn_ids(
    state: Any, handle: RunBoundary, tool_call_id: str, messages_key: str
) -> frozenset[str]:
    """The ids of the calls to ``handle``'s tools in the AI message that asked for
    ``tool_call_id`` (the latest one listing it), itself included; only it when no message
    of the state lists it."""
    from langchain_core.messages import AIMessage

    messages = state.get(messages_key) if isinstance(state, Mapping) else state
    if not isinstance(messages, list):
        messages = getattr(state, messages_key, None)
    names = {spec.name for spec in handle.tools()}
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, AIMessage) and any(
            c.get("id") == tool_call_id for c in message.tool_calls
        ):
            return frozenset(
                str(c["id"]) for c in message.tool_calls if c.get("id") and c.get("name") in names
            ) | {tool_call_id}
    return frozenset({tool_call_id})
