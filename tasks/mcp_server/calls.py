"""The MCP server's one seam to the boundary: every call it makes, awaitable.

Submits and waits use the boundary's asyncio calls (a wait wakes on the call's seal); the
few synchronous calls left (run lookup, cancel, a task's record and TTL) are short and run on
a worker thread, so the event loop never blocks.
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
from boundary.flow import Flow
from boundary.store.redis_run_owners import RedisRunOwners
from boundary.store.redis_tasks import RedisTaskIndex, TaskEntry
from tasks.mcp_server.oauth.principal import Principal


@dataclass(frozen=True, slots=True)
class TaskState:
    """What ``tasks/get`` needs of a record: its outcome (``None`` while PROJECTING), its
    timestamps and its remaining TTL."""

    record: CanonicalRecord
    outcome: ToolOutcome | None
    ttl_ms: int | None
    #: What a working task's ``statusMessage`` says: the tool's last heartbeat message, or
    #: for a limited tool's call that waits, "waiting for a slot (N ahead)".
    status_message: str | None = None

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
        #: Run owners (Redis stores only): who may use a run over an OAuth door.
        self.owners = RedisRunOwners.of(boundary.store)

    async def get_run(
        self, run_id: str, principal: Principal | None = None
    ) -> RunContext | ErrorCode:
        """The open run, or the code to answer with (``RUN_NOT_FOUND``, ``STORE_UNAVAILABLE``).

        With an OAuth ``principal``: the run as that principal's (its ``tenant``), once the
        first principal to use it owns it; a run of another owner, or pinned by the harness
        to another tenant, is ``RUN_NOT_FOUND`` like a run that does not exist.
        """
        try:
            run = await asyncio.to_thread(self.boundary.get_run, run_id)
        except StoreError:
            return ErrorCode.STORE_UNAVAILABLE
        if run is None:
            return ErrorCode.RUN_NOT_FOUND
        if principal is None:
            return run
        if run.tenant is not None and run.tenant != principal.tenant:
            return ErrorCode.RUN_NOT_FOUND
        if self.owners is None:
            return ErrorCode.RUN_NOT_FOUND
        try:
            owned = await asyncio.to_thread(self.owners.own, run_id, principal.owner)
        except StoreError:
            return ErrorCode.STORE_UNAVAILABLE
        if not owned.allowed:
            return ErrorCode.RUN_NOT_FOUND
        return run.model_copy(update={"tenant": principal.tenant})

    async def submit(self, envelope: ToolCallEnvelope, run: RunContext) -> Submission:
        return await self.boundary.asubmit(envelope, run)

    async def outcome(self, key: CanonicalKey, timeout_s: float) -> ToolOutcome | None:
        """The call's outcome, waiting up to ``timeout_s`` (woken by the seal, not polled);
        ``None`` while still PROJECTING. Cancelling the request stops only the wait."""
        outcome = await self.boundary.aoutcome(key.run_id, key.tool_call_id, timeout=timeout_s)
        return None if outcome.pending else outcome

    async def wait(self, key: CanonicalKey, timeout_s: float) -> ToolOutcome:
        """The call's outcome, waiting up to ``timeout_s``; ``pending`` while PROJECTING."""
        return await self.boundary.aoutcome(key.run_id, key.tool_call_id, timeout=timeout_s)

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
        outcome = ToolOutcome.from_record(record)
        message = record.progress_message
        flow = store.flow
        if outcome is None and isinstance(flow, Flow):
            progress = flow.progress(record)
            if progress is not None and progress.waiting:
                message = progress.message
        return TaskState(record, outcome, store.ttl_ms(key), message)

    async def cancel(self, key: CanonicalKey) -> ToolOutcome:
        return await asyncio.to_thread(self.boundary.cancel, key.run_id, key.tool_call_id)


class TaskIndex:
    """Awaitable forms of the MCP task index (``boundary.store.redis_tasks``): task ids mapped
    to records, per owner. ``None`` index: a store that is not Redis, so no 2025-11-25 tasks.

    Raises (every method):
        StoreError: the store cannot be read or written.
    """

    def __init__(self, boundary: ToolBoundary) -> None:
        self.index = RedisTaskIndex.of(boundary.store)

    @property
    def available(self) -> bool:
        return self.index is not None

    async def add(self, entry: TaskEntry) -> None:
        assert self.index is not None
        await asyncio.to_thread(self.index.add, entry)

    async def get(self, task_id: str) -> TaskEntry | None:
        if self.index is None:
            return None
        return await asyncio.to_thread(self.index.get, task_id)

    async def page(
        self, owner: str, after: str | None, limit: int
    ) -> tuple[list[TaskEntry], str | None]:
        if self.index is None:
            return [], None
        return await asyncio.to_thread(self.index.page, owner, after, limit)
