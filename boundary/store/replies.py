"""What the canonical store's methods take and answer (``boundary.store.base``): the terms of
a create and a seal, and the statuses, claims and summaries the store replies with."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple, Required, TypedDict

from boundary.diagnostics import Diagnostic
from boundary.errors import ErrorCode
from boundary.models import CanonicalKey, CanonicalRecord, EvidenceStatus

#: Default record TTL, in seconds.
DEFAULT_TTL_S = 24 * 3600


class CreateStatus(StrEnum):
    CREATED = "CREATED"
    #: The id is used by the same call (same fingerprint, or a record without one).
    DUPLICATE = "DUPLICATE"
    #: The id is used by another call (other tool or other arguments).
    CONFLICT = "CONFLICT"
    RUN_BUDGET = "RUN_BUDGET"
    TOOL_BUDGET = "TOOL_BUDGET"

    @property
    def error_code(self) -> ErrorCode | None:
        return _CREATE_CODES.get(self)


_CREATE_CODES = {
    CreateStatus.DUPLICATE: ErrorCode.DUPLICATE_TOOL_CALL,
    CreateStatus.CONFLICT: ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT,
    CreateStatus.RUN_BUDGET: ErrorCode.RUN_BUDGET_EXHAUSTED,
    CreateStatus.TOOL_BUDGET: ErrorCode.TOOL_BUDGET_EXHAUSTED,
}


class CreateTerms(TypedDict):
    """The keyword arguments of a store's ``create`` (sync and asyncio alike)."""

    tool_name: str
    #: Canonical JSON of the call's arguments.
    request: str
    deadline: datetime | None
    max_pending_s: float
    reap_grace_s: float
    #: The run's call budget (``None``: no budget).
    max_run_calls: int | None
    #: The run's budget for this tool (``None``: no budget).
    max_tool_calls: int | None


class SealTerms(TypedDict, total=False):
    """The keyword arguments of a store's ``seal``: ``evidence_status`` and, each ``None``
    when not given, the agent-facing result, its scope, the error code and the failure's
    diagnostic."""

    evidence_status: Required[EvidenceStatus]
    agent_result: str | None
    scope: str | None
    error_code: ErrorCode | None
    diagnostic: Diagnostic | None
    #: Seal only the record created at this time (the one the caller read): a record under
    #: the same ids created at another time answers ``WriteStatus.REPLACED``.
    created_at: datetime | None
    #: The version of the projector that made this projection (``ToolSpec.projector_version``),
    #: written into the record; ``None``: not written.
    projector_version: str | None
    #: Seal only while this attempt is the call's current one (its fencing token): a seal of
    #: an attempt another took over answers ``WriteStatus.SUPERSEDED`` and writes nothing.
    attempt: int | None
    #: The reaper's seal: the store's time it read its list of due calls at. Seal only while
    #: the call is still past its reap time and its tool did not start since; else
    #: ``WriteStatus.NOT_DUE`` (nothing written).
    due_at: datetime | None
    #: Also keep this raw response (canonical JSON), in the same write: the seal of a call
    #: projected in line (``boundary.steps.project_held``). A record that holds one already
    #: answers ``WriteStatus.ALREADY_STORED`` (nothing written).
    raw: str | None


@dataclass(frozen=True, slots=True)
class CreateResult:
    status: CreateStatus
    #: The run's sequence number of the call (acceptance order), when created.
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the store's server does with memory and restarts (for the start-up check)."""

    #: ``noeviction`` keeps every key; any other policy may drop records, duplicate marks and
    #: budgets silently once ``maxmemory`` is reached.
    maxmemory_policy: str
    #: Bytes; 0 is no limit.
    maxmemory: int
    #: Append-only file on: every write survives a restart (to the fsync policy).
    aof: bool
    #: RDB snapshots written (one since the server started, or one in progress: ``INFO`` does
    #: not show the ``save`` schedule): writes since the last one are lost.
    rdb: bool

    @property
    def evicts(self) -> bool:
        return self.maxmemory_policy != "noeviction"

    @property
    def persistent(self) -> bool:
        return self.aof or self.rdb


class ReapDecision(StrEnum):
    """What the reaper does with a call still PROJECTING past its reap time."""

    #: Its raw response is kept: project it again (its reap time moved on).
    REPROJECT = "REPROJECT"
    #: Nothing to project, or re-projections used up: seal it WORKER_LOST.
    SEAL = "SEAL"
    #: Already sealed, missing or expired: nothing to do.
    GONE = "GONE"
    #: Not due any more (its reap time moved on, or its tool started since the reaper read
    #: its list): left alone.
    LEFT = "LEFT"


class WriteStatus(StrEnum):
    """Result of a conditional write (store raw, seal)."""

    OK = "OK"
    #: The record is missing or expired; nothing was written (and nothing re-created).
    MISSING = "MISSING"
    #: The record is already sealed.
    NOT_PROJECTING = "NOT_PROJECTING"
    #: A raw response is already stored.
    ALREADY_STORED = "ALREADY_STORED"
    #: The record under these ids is not the one the caller read (``created_at`` of a seal):
    #: that call expired and another with the same ids was created since. Nothing written.
    REPLACED = "REPLACED"
    #: Another attempt of the call runs it now (start, heartbeat, raw, seal, retry): this one
    #: is stale and must stop; nothing written.
    SUPERSEDED = "SUPERSEDED"
    #: The reaper's step on a call that is not due any more (its reap time moved on, or its
    #: tool started after the reaper read its list): left alone, nothing written.
    NOT_DUE = "NOT_DUE"
    #: A step meant for a call whose tool has not started found it started: left alone.
    STARTED = "STARTED"


class ClaimStatus(StrEnum):
    """What came of an execute step's claim on its call (``CanonicalStore.claim``)."""

    #: The tool may run: the record is stamped started.
    STARTED = "STARTED"
    #: The record is missing or expired.
    MISSING = "MISSING"
    #: The record is sealed.
    SEALED = "SEALED"
    #: A raw response is kept: project it, run nothing.
    STORED = "STORED"
    #: Another attempt has the call: this message is stale.
    SUPERSEDED = "SUPERSEDED"
    #: The run's deadline passed while the call waited: the tool must not start.
    PAST_DEADLINE = "PAST_DEADLINE"


@dataclass(frozen=True, slots=True)
class Claim:
    status: ClaimStatus
    #: The record as the claim left it (``STARTED`` only).
    record: CanonicalRecord | None = None
    #: The store's clock at the claim (``STARTED`` only).
    now: datetime | None = None


@dataclass(frozen=True, slots=True)
class AttemptState:
    """Where a PROJECTING call's attempts stand (what the reaper needs to retry it)."""

    tool_name: str
    #: The current attempt (1 for the first send).
    attempt: int
    #: Its tool started (and did not finish: no raw response is kept).
    started: bool
    #: A raw response is kept: the call needs projecting, not running.
    has_raw: bool
    #: Sends of a message that never reached a tool (they are not attempts of the tool).
    redispatches: int
    #: Attempts a draining worker handed back (``boundary.handback``): not the tool's fault.
    handbacks: int = 0

    @property
    def tool_runs(self) -> int:
        """Attempts whose message was sent for the tool to run, re-sends and hand-backs left
        out."""
        return self.attempt - self.redispatches - self.handbacks


class OpenRunStatus(StrEnum):
    """Result of ``open_run``."""

    OPENED = "OPENED"
    #: Already open with exactly this policy: nothing changed.
    ALREADY_OPEN = "ALREADY_OPEN"
    #: The run was closed: a closed run is never reopened.
    CLOSED = "CLOSED"
    #: The run is open with another policy, which is kept (a policy is never replaced).
    CONFLICT = "CONFLICT"

    @property
    def is_open(self) -> bool:
        """True when the run is now open with the policy that was asked for."""
        return self in (OpenRunStatus.OPENED, OpenRunStatus.ALREADY_OPEN)


@dataclass(frozen=True, slots=True)
class ProgressEntry:
    """One indexed identity of a run's progress set, and the record it points to (if any)."""

    #: ``None`` when the member is not an identity this code wrote: it points to no record.
    key: CanonicalKey | None
    seq: int
    #: When the record was due to expire, epoch seconds (recorded at seal).
    expires_at: float
    #: ``None`` when missing or expired; never read for another run's identity. Read
    #: without its raw response (``raw`` is ``None``): a run projection never uses it.
    record: CanonicalRecord | None
    #: The record exists but holds fields this code did not write, so it cannot be read.
    unreadable: bool = False


class ProgressRow(NamedTuple):
    """A ``ProgressEntry`` whose record is left as read (its fields, not decoded): what a
    batch of runs' facts is built from without a model per record or per identity
    (``RunProgressProjector.project_rows``)."""

    #: Both ``None`` when the member is not an identity this code wrote.
    run_id: str | None
    tool_call_id: str | None
    seq: int
    #: When the record was due to expire, epoch seconds (recorded at seal).
    expires_at: float
    #: The record's non-empty progress fields (``codec.PROGRESS_FIELDS``); ``None`` when
    #: missing or expired, and never read for another run's identity.
    fields: dict[str, str] | None


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: str
    calls: int
    ready: int
    error: int
    projecting: int
