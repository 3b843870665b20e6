"""``RunBoundary``: one run's handle on a ``ToolBoundary``, what framework adapters call.

An agent loop knows its run once; each tool call then needs only the framework's
tool_call_id, the tool's name and its arguments: ``boundary.for_run(run).call(id, name, args)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from boundary.door import Door
from boundary.models import ObservedFacts, RunContext, Submission, ToolCallEnvelope, ToolOutcome
from boundary.registry import ToolSpec

#: One call of a model turn: ``(tool_call_id, tool_name, arguments)`` as ``call`` takes them.
ToolCall = tuple[str | None, str | None, Any]

#: How long ``call`` waits for a call's outcome by default, in seconds.
DEFAULT_CALL_TIMEOUT_S = 30.0


class RunBoundary:
    """The calls of one run. The tool_call_id is used exactly as given (never made up).

    Args:
        boundary: the boundary every call passes (a ``ToolBoundary``).
        run: the run the calls belong to; every call is checked against it.
        timeout: how long ``call``/``acall`` wait for an outcome unless told otherwise.
    """

    def __init__(
        self, boundary: Door, run: RunContext, *, timeout: float = DEFAULT_CALL_TIMEOUT_S
    ) -> None:
        self.boundary = boundary
        self.run = run
        self.timeout = timeout

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def tools(self) -> list[ToolSpec]:
        """The tools this run may call (authorized and read-only), in registration order:
        what an adapter declares to the model."""
        allowed = self.run.authorized_tools
        return [spec for spec in self.boundary.registry if spec.name in allowed and spec.read_only]

    def envelope(
        self, tool_call_id: str | None, tool_name: str | None, arguments: Any
    ) -> ToolCallEnvelope:
        """The call as the boundary takes it; ``arguments`` is JSON text, bytes or a dict.

        A missing id or name, or one that is not a string (a framework's int id), is handed
        over as missing: preflight refuses it with its code instead of this raising."""
        return ToolCallEnvelope(
            run_id=self.run.run_id,
            tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
            tool_name=tool_name if isinstance(tool_name, str) else None,
            arguments=arguments,
        )

    def submit(
        self,
        tool_call_id: str | None,
        tool_name: str | None,
        arguments: Any,
        *,
        replay: bool = False,
    ) -> Submission:
        """Preflight, record and dispatch without waiting (``replay``: as
        ``ToolBoundary.submit``)."""
        envelope = self.envelope(tool_call_id, tool_name, arguments)
        return self.boundary.submit(envelope, self.run, replay=replay)

    def call(
        self,
        tool_call_id: str | None,
        tool_name: str | None,
        arguments: Any,
        *,
        timeout: float | None = None,
        replay: bool = False,
    ) -> ToolOutcome:
        """Submits the call and waits for its outcome: a bounded result or an error code.

        ``replay=True``: the same call already made under this id (an agent resumed from a
        checkpoint) returns the first call's outcome instead of ``DUPLICATE_TOOL_CALL``."""
        envelope = self.envelope(tool_call_id, tool_name, arguments)
        return self.boundary.invoke(
            envelope, self.run, timeout=self._timeout(timeout), replay=replay
        )

    async def acall(
        self,
        tool_call_id: str | None,
        tool_name: str | None,
        arguments: Any,
        *,
        timeout: float | None = None,
        replay: bool = False,
    ) -> ToolOutcome:
        """``call`` for an event loop: the loop is never blocked while the call runs."""
        envelope = self.envelope(tool_call_id, tool_name, arguments)
        # Woken by the call's seal notification: no thread, the event loop is never blocked.
        return await self.boundary.ainvoke(
            envelope, self.run, timeout=self._timeout(timeout), replay=replay
        )

    def submit_many(self, calls: Sequence[ToolCall]) -> list[Submission]:
        """A model turn's calls, each ``(tool_call_id, tool_name, arguments)``, submitted in
        one round trip each way (``ToolBoundary.submit_many``); answers in the order given."""
        return self.boundary.submit_many(self._envelopes(calls), self.run)

    def call_many(
        self, calls: Sequence[ToolCall], *, timeout: float | None = None
    ) -> list[ToolOutcome]:
        """``submit_many`` then wait for all (``ToolBoundary.invoke_many``), ``timeout``
        bounding the whole turn; outcomes in the order given."""
        return self.boundary.invoke_many(self._envelopes(calls), self.run, self._timeout(timeout))

    async def acall_many(
        self, calls: Sequence[ToolCall], *, timeout: float | None = None
    ) -> list[ToolOutcome]:
        """``call_many`` for an event loop (``ToolBoundary.ainvoke_many``)."""
        envelopes = self._envelopes(calls)
        return await self.boundary.ainvoke_many(envelopes, self.run, self._timeout(timeout))

    def _envelopes(self, calls: Sequence[ToolCall]) -> list[ToolCallEnvelope]:
        return [self.envelope(call_id, name, arguments) for call_id, name, arguments in calls]

    def outcome(self, tool_call_id: str, *, timeout: float | None = None) -> ToolOutcome:
        """The outcome of a call submitted earlier in this run."""
        return self.boundary.outcome(self.run.run_id, tool_call_id, timeout=self._timeout(timeout))

    def observe(self) -> ObservedFacts:
        """The run's READY calls as bounded observed facts."""
        return self.boundary.observe(self.run)

    def _timeout(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout
