"""pydantic-ai: the registry as a toolset whose every call runs through the boundary under
``ctx.tool_call_id``.

Glue::

    agent = Agent(model, toolsets=[BoundaryToolset(boundary.for_run(run))])

Arguments are not validated by pydantic-ai (its validator accepts anything): the boundary's
preflight and the tool's ``input_schema`` decide. Errors are mapped deliberately:
INVALID_ARGUMENTS and the retryable codes (a new call may succeed) raise ``ModelRetry``, so the
model corrects its arguments or tries again, within the toolset's ``max_retries`` (pydantic-ai
ends the run once they are spent); every other ERROR raises ``ToolFailed``, a terminal failure
the model sees (code and sentence only) and adapts to. Requires ``pydantic-ai-slim``
(``pip install tool-boundary[pydantic-ai]``), imported on first use of ``BoundaryToolset``
or ``answer``, not with this module.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from boundary import ErrorCode, RunBoundary, ToolOutcome
from boundary.adapters._common import Call, arun_calls, outcome_text

if TYPE_CHECKING:
    from pydantic_ai.toolsets import AbstractToolset

#: How often the model may retry a call that ended in a retryable error, per tool.
DEFAULT_MAX_RETRIES = 2


def __getattr__(name: str) -> Any:
    # ``BoundaryToolset`` subclasses pydantic-ai's ``AbstractToolset``: it is defined on first
    # use, so importing this module imports no agent SDK.
    if name == "BoundaryToolset":
        return toolset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def toolset_class() -> type[AbstractToolset[Any]]:
    """``BoundaryToolset``, defined (and pydantic-ai imported) on the first call."""
    from pydantic_ai import RunContext
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
    from pydantic_core import SchemaValidator, core_schema

    #: Arguments pass through as given: the boundary validates them.
    any_arguments = SchemaValidator(core_schema.any_schema())

    class BoundaryToolset(AbstractToolset[Any]):
        """The run's tools (``RunBoundary.tools()``) as a pydantic-ai toolset."""

        def __init__(
            self,
            handle: RunBoundary,
            *,
            max_retries: int = DEFAULT_MAX_RETRIES,
            id: str | None = "tool-boundary",
            replay: bool = False,
        ) -> None:
            self.handle = handle
            self.max_retries = max_retries
            self._id = id
            #: A call already made under its id with the same tool and arguments (a resumed run)
            #: gets the first call's outcome instead of ``DUPLICATE_TOOL_CALL``.
            self.replay = replay

        @property
        def id(self) -> str | None:
            return self._id

        async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
            return {
                spec.name: ToolsetTool(
                    toolset=self,
                    tool_def=ToolDefinition(
                        name=spec.name,
                        description=spec.description or None,
                        parameters_json_schema=spec.arguments_schema,
                        strict=False,
                    ),
                    max_retries=self.max_retries,
                    args_validator=any_arguments,
                )
                for spec in self.handle.tools()
            }

        async def call_tool(
            self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
        ) -> Any:
            """Runs the call under ``ctx.tool_call_id``; returns the outcome's text, or raises
            ``ModelRetry``/``ToolFailed`` for an ERROR (see the module's docstring)."""
            call = Call(ctx.tool_call_id, name, tool_args)
            outcome = (await arun_calls(self.handle, [call], replay=self.replay))[0]
            return answer(outcome)

    return BoundaryToolset


def answer(outcome: ToolOutcome) -> str:
    """The text of a READY (or still running) outcome. An ERROR raises ``ModelRetry`` when a
    new call may succeed (INVALID_ARGUMENTS, or a code that is ``retryable``), else
    ``ToolFailed``."""
    from pydantic_ai.exceptions import ModelRetry, ToolFailed

    text = outcome_text(outcome)
    if outcome.is_error:
        code = outcome.error_code
        if code is ErrorCode.INVALID_ARGUMENTS or (code is not None and code.retryable):
            raise ModelRetry(text)
        raise ToolFailed(text)
    return text
