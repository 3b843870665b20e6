"""What the call paths and the run handle see of a ``ToolBoundary``, as Protocols.

``sync_calls``, ``aio_calls`` and ``handle`` are typed through these, so none of them
imports ``core`` (which imports them): the import graph of ``boundary/`` stays a tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from boundary.call_steps import PrepareTerms
from boundary.dispatch import Dispatcher
from boundary.models import ObservedFacts, RunContext, Submission, ToolCallEnvelope, ToolOutcome
from boundary.progress import RunProgressProjector


class CallTerms(PrepareTerms, Protocol):
    """A boundary's parts and settings, read by both call paths at every call."""

    dispatcher: Dispatcher
    run_projector: RunProgressProjector
    #: Longest single wait on the dispatcher before the record is read again, s.
    poll_s: float


class Door(CallTerms, Protocol):
    """A boundary's public calls that the async path (running the sync ones on threads when
    the store has no asyncio side) and ``RunBoundary`` use."""

    def submit(
        self, envelope: ToolCallEnvelope, run: RunContext, *, replay: bool = False
    ) -> Submission: ...

    def invoke(
        self,
        envelope: ToolCallEnvelope,
        run: RunContext,
        timeout: float | None = None,
        *,
        replay: bool = False,
    ) -> ToolOutcome: ...

    def outcome(
        self, run_id: str, tool_call_id: str, timeout: float | None = None
    ) -> ToolOutcome: ...

    def submit_many(
        self, envelopes: Sequence[ToolCallEnvelope], run: RunContext
    ) -> list[Submission]: ...

    def invoke_many(
        self,
        envelopes: Sequence[ToolCallEnvelope],
        run: RunContext,
        timeout: float | None = None,
    ) -> list[ToolOutcome]: ...

    async def ainvoke_many(
        self,
        envelopes: Sequence[ToolCallEnvelope],
        run: RunContext,
        timeout: float | None = None,
    ) -> list[ToolOutcome]: ...

    def observe(
        self, run: RunContext | str, *, projector_version: str | None = None
    ) -> ObservedFacts: ...

    async def ainvoke(
        self,
        envelope: ToolCallEnvelope,
        run: RunContext,
        timeout: float | None = None,
        *,
        replay: bool = False,
    ) -> ToolOutcome: ...
