"""The MCP server's options, each declared once: ``CallOptions`` are the tunable ones, read
from the environment by ``MCPSettings`` (``TOOL_BOUNDARY_MCP_*``); ``ServerOptions`` adds what
the entry point decides (the run, ``tasks/list``, OAuth) and is what ``build_server`` takes.

No SDK import here: the CLI loads this without the ``mcp`` extra.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: A tool's ``execution.taskSupport`` (2025-11-25), and whether a call may run as a task.
TaskSupport = Literal["forbidden", "optional", "required"]


class CallOptions(BaseModel):
    """How the server answers calls and tasks (each also a ``TOOL_BOUNDARY_MCP_*`` setting)."""

    #: ``pollIntervalMs`` suggested to task pollers.
    poll_interval_ms: int = Field(default=500, gt=0)
    #: How long a plain (not task-augmented) ``tools/call`` waits before cancelling the call.
    call_wait_s: float = Field(default=600.0, gt=0)
    #: Longest gap between two ``notifications/progress`` of a call that asked for them.
    progress_s: float = Field(default=5.0, gt=0)
    #: Every tool's task support: its ``execution.taskSupport`` on 2025-11-25 connections, and
    #: on 2026-07-28 whether its calls become tasks (``forbidden``: never; ``required``:
    #: always, a request without the Tasks extension refused)...
    task_support: TaskSupport = "optional"
    #: ...unless named here, as JSON: ``{"slow_report": "required"}``.
    tool_task_support: dict[str, TaskSupport] = {}
    #: Refuse calls whose ``_meta`` names no tool_call_id (``INVALID_TOOL_CALL_ID``) instead
    #: of minting one.
    require_call_id: bool = Field(
        default=False,
        description="Refuse calls whose _meta names no tool-boundary/tool_call_id "
        "(INVALID_TOOL_CALL_ID) instead of minting one.",
    )


class ServerOptions(CallOptions):
    """Everything ``build_server`` is told: the call options and what the entry point decides."""

    model_config = ConfigDict(frozen=True)

    #: The run of requests whose ``_meta`` names none (``--run``).
    run_id: str | None = Field(
        default=None, description="The run of requests whose _meta names none."
    )
    #: ``tasks/list`` is offered (off where requesters cannot be told apart: HTTP without a
    #: token).
    list_tasks: bool = True
    #: Requests carry a checked OAuth principal (HTTP with issuers): it decides the tools
    #: listed and callable, and the runs and tasks the requester sees.
    oauth: bool = False

    @classmethod
    def of(
        cls, settings: CallOptions, *, run_id: str | None, list_tasks: bool, oauth: bool
    ) -> ServerOptions:
        """The settings' call options, with what the entry point decided."""
        calls = settings.model_dump(include=set(CallOptions.model_fields))
        return cls(**calls, run_id=run_id, list_tasks=list_tasks, oauth=oauth)

    def support_of(self, tool_name: str) -> TaskSupport:
        """The tool's task support as configured."""
        return self.tool_task_support.get(tool_name, self.task_support)
