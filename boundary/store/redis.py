"""The Redis implementation of the canonical store: with ``_redis_common``, the only modules
that import ``redis`` (opened runs live in ``redis_runs``).

Each state change is one Lua script (in ``lua/``, every key passed in KEYS). Reads use HGETALL,
which never touches expiry. Every driver error becomes ``StoreUnavailable``/``StoreError``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import redis
import redis.cluster
from pydantic import ValidationError

from boundary.diagnostics import Diagnostic
from boundary.errors import ErrorCode, StoreError
from boundary.limits import Limits
from boundary.models import (
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    RunContext,
)
from boundary.store import keys
from boundary.store._redis_common import load_script
from boundary.store._redis_common import translated as _translated
from boundary.store.base import (
    DEFAULT_TTL_S,
    CanonicalStore,
    CreateResult,
    CreateStatus,
    OpenRunStatus,
    ProgressEntry,
    RunSummary,
    WriteStatus,
)
from boundary.store.redis_runs import RedisRuns

#: Seconds to wait for a connection before the store counts as unavailable.
DEFAULT_CONNECT_TIMEOUT_S = 2.0
#: Seconds to wait for a reply before the store counts as unavailable.
DEFAULT_SOCKET_TIMEOUT_S = 5.0
#: Connections a store made by ``from_url`` keeps; more concurrent callers wait for one.
DEFAULT_MAX_CONNECTIONS = 100
#: SCAN batch size hint.
SCAN_COUNT = 1000
#: Runs summarised per pipeline (``run_summaries``).
SUMMARY_BATCH = 1000

_WRITE_CODES = {
    1: WriteStatus.OK,
    0: WriteStatus.MISSING,
    -1: WriteStatus.NOT_PROJECTING,
    -2: WriteStatus.ALREADY_STORED,
}

RedisClient = redis.Redis | redis.cluster.RedisCluster


#: Script sources, read once with the package.
_CREATE = load_script("create")
_STORE_RAW = load_script("store_raw")
_SEAL = load_script("seal")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _from_ms(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


#: What a run projection or an outcome reads of a record: everything but the raw response,
#: which they never use and which may be up to ``max_raw_bytes`` per call.
_PROGRESS_FIELDS = (
    "run_id",
    "tool_call_id",
    "tool_name",
    "status",
    "evidence_status",
    "request",
    "agent_result",
    "scope",
    "error_code",
    "seq",
    "created_at",
    "updated_at",
    "deadline",
    "diagnostic",
)


def _diagnostic(text: str | None) -> Diagnostic | None:
    """A diagnostic this code did not write is left out: it never decides anything."""
    if not text:
        return None
    try:
        return Diagnostic.model_validate_json(text)
    except ValidationError:
        return None


def _decode_record(fields: dict[str, str]) -> CanonicalRecord:
    try:
        return CanonicalRecord(
            run_id=fields["run_id"],
            tool_call_id=fields["tool_call_id"],
            tool_name=fields["tool_name"],
            status=InvocationStatus(fields["status"]),
            evidence_status=fields.get("evidence_status") or None,
            request=fields["request"],
            raw=fields.get("raw"),
            agent_result=fields.get("agent_result"),
            scope=fields.get("scope"),
            error_code=fields.get("error_code") or None,
            seq=int(fields["seq"]),
            created_at=_from_ms(fields["created_at"]),
            updated_at=_from_ms(fields["updated_at"]),
            deadline=_from_ms(fields.get("deadline")),
            diagnostic=_diagnostic(fields.get("diagnostic")),
        )
    except (KeyError, ValueError, ValidationError):
        # A record this code did not write: refuse it rather than guess.
        raise StoreError(ErrorCode.STORE_UNAVAILABLE) from None


def _progress_member(member: str, score: float) -> tuple[CanonicalKey | None, int, float]:
    """``run_id:tool_call_id:expires_at_ms`` as written by ``seal.lua``; a member this code
    did not write keeps its place (and is counted) but points to no record."""
    identity, _, expires_ms = member.rpartition(":")
    try:
        key: CanonicalKey | None = CanonicalKey.from_identity(identity)
    except ValidationError:
        key = None
    try:
        expires_at = int(expires_ms) / 1000
    except ValueError:
        expires_at = math.inf
    return key, int(score), expires_at


def _entries(
    parsed: list[tuple[CanonicalKey | None, int, float]], found: dict[str, dict[str, str]]
) -> list[ProgressEntry]:
    entries = []
    for key, seq, expires_at in parsed:
        fields = found.get(key.identity) if key is not None else None
        record: CanonicalRecord | None = None
        unreadable = False
        if fields:
            try:
                record = _decode_record(fields)
            except StoreError:
                unreadable = True  # excluded, rather than failing the whole run
        entries.append(ProgressEntry(key, seq, expires_at, record, unreadable))
    return entries


class RedisCanonicalStore(CanonicalStore):
    """Canonical records in Redis (or Redis Cluster), one hash per call.

    Args:
        client: a ready ``redis.Redis`` or ``redis.cluster.RedisCluster``; it must decode
            responses (``decode_responses=True``).
        ttl_s: record TTL, set once at create.
        limits: byte limits.
        clock: epoch seconds; injectable for tests.
    """

    def __init__(
        self,
        *,
        client: RedisClient,
        ttl_s: float = DEFAULT_TTL_S,
        limits: Limits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        self.client = client
        self.ttl_s = ttl_s
        self.limits = limits or Limits()
        self._clock = clock
        self._create = client.register_script(_CREATE)
        self._store_raw = client.register_script(_STORE_RAW)
        self._seal = client.register_script(_SEAL)
        self._runs = RedisRuns(client, ttl_s, self._now_ms)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        limits: Limits | None = None,
        **client_options: Any,
    ) -> RedisCanonicalStore:
        """A store on ``url`` (``redis://``, ``rediss://`` or ``unix://``)."""
        client_options.setdefault("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)
        client_options.setdefault("socket_timeout", DEFAULT_SOCKET_TIMEOUT_S)
        client_options.setdefault("max_connections", DEFAULT_MAX_CONNECTIONS)
        # redis-py's default pool raises at once when all its connections are busy, which
        # would turn a burst of concurrent calls into STORE_UNAVAILABLE. A blocking pool makes
        # the burst wait for a free connection, up to the socket timeout.
        client_options.setdefault("timeout", client_options["socket_timeout"])
        client_options["decode_responses"] = True
        pool = redis.BlockingConnectionPool.from_url(url, **client_options)
        return cls(client=redis.Redis(connection_pool=pool), ttl_s=ttl_s, limits=limits)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def create(
        self,
        key: CanonicalKey,
        *,
        tool_name: str,
        request: str,
        deadline: datetime | None,
        reap_at: datetime,
        max_run_calls: int | None,
        max_tool_calls: int | None,
    ) -> CreateResult:
        argv: list[str | int] = [
            key.run_id,
            key.tool_call_id,
            tool_name,
            request,
            self._now_ms(),
            "" if deadline is None else _ms(deadline),
            int(self.ttl_s * 1000),
            -1 if max_run_calls is None else max_run_calls,
            -1 if max_tool_calls is None else max_tool_calls,
            _ms(reap_at),
            key.identity,
        ]
        run_keys = [keys.record_key(key), keys.budget_key(key.run_id), keys.pending_key(key.run_id)]
        with _translated():
            created, detail = self._create(keys=run_keys, args=argv)
        if int(created) == 1:
            return CreateResult(CreateStatus.CREATED, seq=int(detail))
        return CreateResult(CreateStatus(detail))

    def store_raw(self, key: CanonicalKey, raw: str) -> WriteStatus:
        with _translated():
            code = self._store_raw(keys=[keys.record_key(key)], args=[raw, self._now_ms()])
        return _WRITE_CODES[int(code)]

    def seal(
        self,
        key: CanonicalKey,
        *,
        evidence_status: EvidenceStatus,
        agent_result: str | None = None,
        scope: str | None = None,
        error_code: ErrorCode | None = None,
        diagnostic: Diagnostic | None = None,
    ) -> WriteStatus:
        status = InvocationStatus.ERROR if error_code is not None else InvocationStatus.READY
        run_keys = [
            keys.record_key(key),
            keys.progress_key(key.run_id),
            keys.pending_key(key.run_id),
            keys.budget_key(key.run_id),
        ]
        argv: list[str | int] = [
            status.value,
            evidence_status.value,
            agent_result or "",
            scope or "",
            error_code.value if error_code is not None else "",
            self._now_ms(),
            key.identity,
        ]
        # Last, so the script's other arguments keep their places.
        argv.append(diagnostic.model_dump_json() if diagnostic is not None else "")
        with _translated():
            code = int(self._seal(keys=run_keys, args=argv))
        if code == -2:
            # The combination broke the lifecycle table: a bug in the caller, not bad input.
            raise ValueError("invalid seal: status, evidence status and error code disagree")
        return _WRITE_CODES[code]

    def get(self, key: CanonicalKey, *, with_raw: bool = True) -> CanonicalRecord | None:
        with _translated():
            if with_raw:
                fields: dict[str, str] = self.client.hgetall(keys.record_key(key))  # type: ignore[assignment]
            else:
                values: list[str | None] = self.client.hmget(  # type: ignore[assignment]
                    keys.record_key(key), _PROGRESS_FIELDS
                )
                fields = {f: v for f, v in zip(_PROGRESS_FIELDS, values, strict=True) if v}
        return _decode_record(fields) if fields else None

    def ttl_ms(self, key: CanonicalKey) -> int | None:
        with _translated():
            left = int(self.client.pttl(keys.record_key(key)))
        # -2: no such key; -1: no expiry, which a record never lacks (it is not ours).
        return left if left >= 0 else None

    def progress(self, run_id: str) -> list[ProgressEntry]:
        return self.progress_many([run_id])[run_id]

    def progress_many(self, run_ids: Sequence[str]) -> dict[str, list[ProgressEntry]]:
        """Two round trips whatever the number of runs: one pipeline of ZRANGEs, one of
        HMGETs of every indexed record (no raw response). On a cluster client the pipelines
        are split by slot; each run's keys share one."""
        unique = list(dict.fromkeys(run_ids))
        with _translated():
            pipe = self.client.pipeline(transaction=False)
            for run_id in unique:
                pipe.zrange(keys.progress_key(run_id), 0, -1, withscores=True)
            members: list[list[tuple[str, float]]] = pipe.execute()
        parsed = {
            run_id: [_progress_member(member, score) for member, score in run_members]
            for run_id, run_members in zip(unique, members, strict=True)
        }
        # Only a run's own records are read: another run's identity is excluded unread.
        own = [
            key
            for run_id, entries in parsed.items()
            for key, _, _ in entries
            if key is not None and key.run_id == run_id
        ]
        replies: list[list[str | None]] = []
        if own:
            with _translated():
                pipe = self.client.pipeline(transaction=False)
                for own_key in own:
                    pipe.hmget(keys.record_key(own_key), _PROGRESS_FIELDS)
                replies = pipe.execute()
        found = {
            k.identity: {f: v for f, v in zip(_PROGRESS_FIELDS, values, strict=True) if v}
            for k, values in zip(own, replies, strict=True)
        }
        return {run_id: _entries(entries, found) for run_id, entries in parsed.items()}

    def due_pending(self, now: datetime, limit: int = 1000) -> list[CanonicalKey]:
        due: list[CanonicalKey] = []
        with _translated():
            for pending in self.client.scan_iter(match=keys.PENDING_PATTERN, count=SCAN_COUNT):
                members: list[str] = self.client.zrangebyscore(  # type: ignore[assignment]
                    pending, "-inf", _ms(now), start=0, num=limit - len(due)
                )
                for identity in members:
                    try:
                        due.append(CanonicalKey.from_identity(identity))
                    except ValidationError:
                        continue
                if len(due) >= limit:
                    break
        return due

    def run_ids(self) -> Iterator[str]:
        seen: set[str] = set()
        with _translated():
            for budget in self.client.scan_iter(match=keys.BUDGET_PATTERN, count=SCAN_COUNT):
                run_id = keys.run_id_of(budget)
                if run_id not in seen:
                    seen.add(run_id)
                    yield run_id

    def run_summary(self, run_id: str) -> RunSummary | None:
        found = self.run_summaries([run_id])
        return found[0] if found else None

    def run_summaries(self, run_ids: Sequence[str]) -> list[RunSummary]:
        """One pipeline per ``SUMMARY_BATCH`` runs (a round trip each, not one per run)."""
        summaries = []
        for start in range(0, len(run_ids), SUMMARY_BATCH):
            batch = run_ids[start : start + SUMMARY_BATCH]
            with _translated():
                pipe = self.client.pipeline(transaction=False)
                for run_id in batch:
                    pipe.hmget(keys.budget_key(run_id), "calls", "sealed:READY", "sealed:ERROR")
                    pipe.zcard(keys.pending_key(run_id))
                replies = pipe.execute()
            for n, run_id in enumerate(batch):
                (calls, ready, error), projecting = replies[2 * n], replies[2 * n + 1]
                if calls is None:
                    continue
                summaries.append(
                    RunSummary(
                        run_id=run_id,
                        calls=int(calls),
                        ready=int(ready or 0),
                        error=int(error or 0),
                        projecting=int(projecting),
                    )
                )
        return summaries

    def open_run(self, run: RunContext) -> OpenRunStatus:
        return self._runs.open_run(run)

    def get_run(self, run_id: str) -> RunContext | None:
        return self._runs.get_run(run_id)

    def close_run(self, run_id: str) -> bool:
        return self._runs.close_run(run_id)

    def ping(self) -> None:
        with _translated():
            self.client.ping()
