"""The MCP server's one seam to the boundary: every call it makes, awaitable.

The boundary's API is synchronous; each call runs in a worker thread so the event loop never
blocks. Waits are cut into short slices so a cancelled request (client gone, server stopping)
stops waiting within one slice.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from boundary import (
    CanonicalKey,
    CanonicalRecord,
    ErrorCode,
    InvocationStatus,
    RunContext,
    StoreError,
    Submission,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.steps import outcome_from_record

#: Longest single wait on the boundary, seconds: a cancelled request stops within this.
WAIT_SLICE_S = 1.0


@dataclass(frozen=True, slots=True)
class TaskState:
    """What ``tasks/get`` needs of a record: its outcome (``None`` while PROJECTING), its
    timestamps and its remaining TTL."""

    record: CanonicalRecord
    outcome: ToolOutcome | None
    ttl_ms: int | None

    @property
    def created_at(self) -> datetime:
        return self.record.created_at

    @property
    def updated_at(self) -> datetime:
        return self.record.updated_at


class BoundaryCalls:
    """Awaitable forms of the boundary calls the server makes."""

    def __init__(self, boundary: ToolBoundary) -> None:
        self.boundary = boundary

    async def get_run(self, run_id: str) -> RunContext | ErrorCode:
        """The open run, or the code to answer with (``RUN_NOT_FOUND``, ``STORE_UNAVAILABLE``)."""
        try:
            run = await asyncio.to_thread(self.boundary.get_run, run_id)
        except StoreError:
            return ErrorCode.STORE_UNAVAILABLE
        return run if run is not None else ErrorCode.RUN_NOT_FOUND

    async def submit(self, envelope: ToolCallEnvelope, run: RunContext) -> Submission:
        return await asyncio.to_thread(self.boundary.submit, envelope, run)

    async def outcome(self, key: CanonicalKey, timeout_s: float) -> ToolOutcome | None:
        """The call's outcome, waiting up to ``timeout_s``; ``None`` while still PROJECTING."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout_s
        while True:
            left = give_up - loop.time()
            slice_s = max(0.0, min(WAIT_SLICE_S, left))
            outcome = await asyncio.to_thread(self._outcome, key, slice_s)
            if outcome is not None or left <= slice_s:
                return outcome

    def _outcome(self, key: CanonicalKey, timeout_s: float) -> ToolOutcome | None:
        try:
            outcome = self.boundary.outcome(key.run_id, key.tool_call_id, timeout=timeout_s)
        except TimeoutError:
            return None
        return None if outcome.status is InvocationStatus.PROJECTING else outcome

    async def task_state(self, key: CanonicalKey) -> TaskState | None:
        """The record behind a task, ``None`` when missing or expired.

        Raises:
            StoreError: the store cannot be read.
        """
        return await asyncio.to_thread(self._task_state, key)

    def _task_state(self, key: CanonicalKey) -> TaskState | None:
        store = self.boundary.store
        record = store.get(key, with_raw=False)
        if record is None:
            return None
        return TaskState(record, outcome_from_record(record), store.ttl_ms(key))

    async def cancel(self, key: CanonicalKey) -> ToolOutcome:
        return await asyncio.to_thread(self.boundary.cancel, key.run_id, key.tool_call_id)
