"""The MCP server's one seam to the boundary: every call it makes, awaitable.

The boundary's API is synchronous; each call runs in a worker thread so the event loop never
blocks, and no thread is held for a wait: a waited-for call's record is read again and again
between async sleeps, so a cancelled request (client gone, server stopping) stops at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from boundary import (
    CanonicalKey,
    CanonicalRecord,
    ErrorCode,
    RunContext,
    StoreError,
    Submission,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.steps import outcome_from_record

#: First and longest pause between two reads of a waited-for record, seconds.
FIRST_POLL_S = 0.02
MAX_POLL_S = 0.25


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
        """The call's outcome, waiting up to ``timeout_s``; ``None`` while still PROJECTING.

        Polls the record (each read a short thread job, backing off from ``FIRST_POLL_S`` to
        ``MAX_POLL_S``) rather than holding a thread in a blocking wait: the loop's few
        threads stay free for other requests however many calls wait.
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout_s
        pause = FIRST_POLL_S
        while True:
            outcome = await asyncio.to_thread(self._sealed_outcome, key)
            left = give_up - loop.time()
            if outcome is not None or left <= 0:
                return outcome
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, MAX_POLL_S)

    def _sealed_outcome(self, key: CanonicalKey) -> ToolOutcome | None:
        try:
            record = self.boundary.store.get(key, with_raw=False)
        except StoreError:
            return ToolOutcome.error(key.tool_call_id, ErrorCode.STORE_UNAVAILABLE)
        if record is None:
            return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
        return outcome_from_record(record)

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
