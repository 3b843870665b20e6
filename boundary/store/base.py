"""The canonical store interface. Implementations translate every driver error into
``StoreError``/``StoreUnavailable``; nothing of the driver crosses this line."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple, Protocol, Required, TypedDict, Unpack

from boundary.diagnostics import Diagnostic
from boundary.errors import ErrorCode
from boundary.limits import Limits
from boundary.models import (
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    RunContext,
)

if TYPE_CHECKING:
    from boundary.store.flow_hooks import FlowHooks
    from boundary.store.notify import Watch

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
    #: RDB snapshots configured (``save`` not empty): writes since the last one are lost.
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


class AsyncStore(Protocol):
    """What the boundary's async calls need of a store, on one event loop."""

    async def create(self, key: CanonicalKey, **terms: Unpack[CreateTerms]) -> CreateResult: ...

    async def seal_error(self, key: CanonicalKey, code: ErrorCode) -> WriteStatus: ...

    async def get(self, key: CanonicalKey) -> CanonicalRecord | None:
        """The record without its raw response."""

    async def progress(self, run_id: str) -> list[ProgressEntry]: ...

    def watch(self, key: CanonicalKey) -> Watch: ...

    async def aclose(self) -> None: ...


class CanonicalStore(ABC):
    """Where each call's one canonical record lives."""

    limits: Limits
    ttl_s: float
    #: The fleet flow control of this process, told of every seal (``boundary.flow``);
    #: ``None`` for a store without it.
    flow: FlowHooks | None = None

    @abstractmethod
    def create(self, key: CanonicalKey, **terms: Unpack[CreateTerms]) -> CreateResult:
        """Atomically: refuse a duplicate (``DUPLICATE`` for the same call, ``CONFLICT`` for
        another one under the same id, told apart by ``request_sha256``), consume budgets,
        write the record PROJECTING with its fingerprint, set its TTL (the only place a TTL
        is set), and its reap time: ``min(deadline, now + max_pending_s) + reap_grace_s``,
        ``now`` being the store's clock."""

    def create_many(self, calls: Sequence[tuple[CanonicalKey, CreateTerms]]) -> list[CreateResult]:
        """``create`` of each call (of one run), in the order given, each with the result it
        would have one by one: a duplicate within the calls too, budgets charged in order. A
        store that can (Redis: one script) does it in one round trip; this default makes
        one ``create`` after the other."""
        return [self.create(key, **terms) for key, terms in calls]

    @abstractmethod
    def store_raw(self, key: CanonicalKey, raw: str, *, attempt: int | None = None) -> WriteStatus:
        """Keep the complete raw response (canonical JSON) while PROJECTING. ``attempt``: only
        while that attempt is the call's current one (else ``SUPERSEDED``, nothing kept)."""

    def store_raw_into(
        self, record: CanonicalRecord, raw: str, *, attempt: int | None = None
    ) -> tuple[WriteStatus, CanonicalRecord | None]:
        """``store_raw`` for a record just read; when stored, also the record as the store now
        holds it (``record`` with the raw response and its write time), or ``None`` when this
        store cannot tell the write time."""
        return self.store_raw(record.key, raw, attempt=attempt), None

    @abstractmethod
    def seal(self, key: CanonicalKey, **terms: Unpack[SealTerms]) -> WriteStatus:
        """PROJECTING -> READY (evidence found or none) or ERROR (evidence ERROR and a code,
        and the failure's ``diagnostic`` when there is one)."""

    def seal_error(
        self,
        key: CanonicalKey,
        code: ErrorCode,
        *,
        diagnostic: Diagnostic | None = None,
        attempt: int | None = None,
        due_at: datetime | None = None,
    ) -> WriteStatus:
        """Seals the call ERROR ``code``; ``attempt`` and ``due_at`` fence it (``SealTerms``)."""
        return self.seal(
            key,
            evidence_status=EvidenceStatus.ERROR,
            error_code=code,
            diagnostic=diagnostic,
            attempt=attempt,
            due_at=due_at,
        )

    @abstractmethod
    def get(self, key: CanonicalKey, *, with_raw: bool = True) -> CanonicalRecord | None:
        """The record, or ``None`` when missing or expired. Never touches the expiry.

        ``with_raw=False`` leaves out the raw response (up to ``max_raw_bytes``), for readers
        that only need the outcome.
        """

    @abstractmethod
    def ttl_ms(self, key: CanonicalKey) -> int | None:
        """The record's remaining TTL in milliseconds, ``None`` when missing or expired. Never
        touches the expiry."""

    @abstractmethod
    def progress(self, run_id: str) -> list[ProgressEntry]:
        """The run's completed identities in acceptance order, each with its record (without
        the raw response). Never touches the expiry."""

    def progress_many(self, run_ids: Sequence[str]) -> dict[str, list[ProgressEntry]]:
        """``progress`` of many runs at once (batch reprocessing). An implementation reads
        them in a few round trips; this default reads them one by one."""
        return {run_id: self.progress(run_id) for run_id in run_ids}

    def progress_rows_many(self, run_ids: Sequence[str]) -> dict[str, list[ProgressRow]] | None:
        """``progress_many`` with each record's fields left as read (``ProgressRow``), for a
        batch of runs' facts built without a model per record; ``None`` when this store
        does not read them so (this default): the caller decodes ``progress_many``."""
        return None

    def claim(
        self, key: CanonicalKey, *, attempt: int, heartbeat_timeouts: Mapping[str, float]
    ) -> Claim:
        """Attempt ``attempt`` claims the call just before its tool runs, and reads it: stamps
        ``started_at`` with the store's clock; for a tool named in ``heartbeat_timeouts``
        (tool -> seconds), the call is due for the reaper once silent that long. Not started
        when missing, sealed, holding a raw response, taken over by another attempt (the
        message is stale: run nothing) or past its deadline (see ``ClaimStatus``).

        This default reads the record and stamps nothing (a store without scripts)."""
        record = self.get(key)
        if record is None:
            return Claim(ClaimStatus.MISSING)
        if record.status is not InvocationStatus.PROJECTING:
            return Claim(ClaimStatus.SEALED)
        if record.raw is not None:
            return Claim(ClaimStatus.STORED)
        if record.attempt != attempt:
            return Claim(ClaimStatus.SUPERSEDED)
        now = self.now()
        if record.deadline is not None and record.deadline <= now:
            return Claim(ClaimStatus.PAST_DEADLINE)
        return Claim(ClaimStatus.STARTED, record, now)

    def heartbeat(
        self,
        key: CanonicalKey,
        *,
        attempt: int,
        progress: float | None,
        message: str | None,
        heartbeat_timeout_s: float | None,
    ) -> WriteStatus:
        """The running tool's sign of life and progress (``None``: unchanged). ``OK`` while
        the call is the tool's to finish; ``NOT_PROJECTING``/``MISSING`` once sealed or gone,
        ``SUPERSEDED`` once another attempt took over: the tool must stop."""
        return WriteStatus.OK

    def retry_attempt(
        self,
        key: CanonicalKey,
        *,
        attempt: int,
        reap_after_s: float,
        reap_grace_s: float,
        redispatch: bool = False,
        due_at: datetime | None = None,
        unstarted: bool = False,
        handback: bool = False,
    ) -> int | WriteStatus:
        """Attempt ``attempt`` ended without a raw response: attempt ``attempt + 1`` takes the
        record over (returned), due for the reaper ``reap_after_s`` from now (never past the
        deadline + ``reap_grace_s``). ``redispatch``: the message never reached a tool (counted
        apart from the tool's attempts). A ``WriteStatus`` when it cannot (sealed, gone, raw
        kept: ``ALREADY_STORED``, moved on by someone else: ``SUPERSEDED``). ``due_at``: the
        reaper's retry (the store's time it read its list at): ``NOT_DUE`` when the call is not
        due any more or its tool started since. ``unstarted``: only while attempt ``attempt``'s
        tool has not started (else ``STARTED``). ``handback``: a draining worker gave the
        running attempt up (counted in ``handbacks``, not as a retry: ``boundary.handback``)."""
        return WriteStatus.NOT_PROJECTING

    def attempt_state(self, key: CanonicalKey) -> AttemptState | None:
        """The PROJECTING call's attempts; ``None`` when sealed, missing or expired."""
        return None

    def defer_reap(self, key: CanonicalKey, *, reap_after_s: float, reap_grace_s: float) -> bool:
        """A call that waits for a slot of its limited tool is not lost: its reap time moves
        ``reap_after_s`` on (never past its deadline + ``reap_grace_s``). ``False`` when it
        is not PROJECTING or its tool started."""
        return False

    def requeue_due(
        self,
        key: CanonicalKey,
        *,
        retry_after_s: float,
        max_reprojections: int,
        due_at: datetime | None = None,
    ) -> ReapDecision:
        """Decides a due call's fate (see ``ReapDecision``); a store that cannot re-project
        seals every due call. ``due_at``: the store's time the reaper read its list at; a
        call not due any more, or whose tool started since, is ``LEFT`` alone."""
        return ReapDecision.SEAL

    def server_facts(self) -> ServerFacts | None:
        """The server's eviction and persistence settings, or ``None`` when unknown."""
        return None

    def now(self) -> datetime:
        """The store's clock: the one clock every deadline and reap time is measured on."""
        return datetime.now(UTC)

    def count_projecting(self) -> int | None:
        """Calls PROJECTING now, from an index (never a scan of the keyspace); ``None`` when
        this store cannot tell cheaply."""
        return None

    def heartbeat_lag_s(self) -> float | None:
        """Seconds since the least recent sign of life (last heartbeat, else its tool's start)
        of the calls whose tool runs now, on the store's clock; ``None`` when none runs or this
        store cannot tell cheaply."""
        return None

    @abstractmethod
    def due_pending(self, now: datetime | None = None, limit: int = 1000) -> list[CanonicalKey]:
        """PROJECTING calls whose reap time has passed, across runs, at ``now`` (default: the
        store's clock, never the caller's)."""

    @abstractmethod
    def run_ids(self) -> Iterator[str]:
        """Every run that has a live budget key (from an index, or by SCAN, never KEYS),
        read a page at a time as it is iterated (never held whole: callers stream it)."""

    @abstractmethod
    def run_summary(self, run_id: str) -> RunSummary | None:
        """Counts of a run's calls by status, or ``None`` for an unknown run."""

    def run_summaries(self, run_ids: Sequence[str]) -> list[RunSummary]:
        """``run_summary`` of many runs, unknown ones left out, in the order given. An
        implementation reads them in batches; this default reads them one by one."""
        found = (self.run_summary(run_id) for run_id in run_ids)
        return [summary for summary in found if summary is not None]

    @abstractmethod
    def open_run(self, run: RunContext) -> OpenRunStatus:
        """Keeps the run's policy (authorized tools, budgets, deadline) under its id, with the
        record TTL, so a server can look the run up by id instead of trusting a caller's."""

    @abstractmethod
    def get_run(self, run_id: str) -> RunContext | None:
        """The open run's policy; ``None`` when unknown, closed or expired. Never touches the
        expiry."""

    @abstractmethod
    def close_run(self, run_id: str) -> bool:
        """Closes an open run for good; ``False`` when it was not open."""

    @abstractmethod
    def ping(self) -> None:
        """Raises ``StoreUnavailable`` when the store cannot be reached."""

    def async_store(self) -> AsyncStore | None:
        """A new asyncio side of this store for the running event loop, or ``None`` when it
        has none (the boundary's async calls then run the sync ones on threads)."""
        return None
