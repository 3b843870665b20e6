"""The canonical store interface. Implementations translate every driver error into
``StoreError``/``StoreUnavailable``; nothing of the driver crosses this line. What its methods
take and answer is in ``boundary.store.replies`` (imported here: this module names them)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, Unpack

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
from boundary.store.replies import (
    DEFAULT_TTL_S,
    AttemptState,
    Claim,
    ClaimStatus,
    CreateResult,
    CreateStatus,
    CreateTerms,
    OpenRunStatus,
    ProgressEntry,
    ProgressRow,
    ReapDecision,
    RunSummary,
    SealTerms,
    ServerFacts,
    WriteStatus,
)

if TYPE_CHECKING:
    from boundary.store.flow_hooks import FlowHooks
    from boundary.store.notify import Watch

__all__ = [
    "DEFAULT_TTL_S",
    "AsyncStore",
    "AttemptState",
    "CanonicalStore",
    "Claim",
    "ClaimStatus",
    "CreateResult",
    "CreateStatus",
    "CreateTerms",
    "OpenRunStatus",
    "ProgressEntry",
    "ProgressRow",
    "ReapDecision",
    "RunSummary",
    "SealTerms",
    "ServerFacts",
    "WriteStatus",
]


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
