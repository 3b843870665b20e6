"""The Redis implementation of the canonical store: with ``_redis_common``, the only modules
that import ``redis`` (opened runs live in ``redis_runs``).

Each state change is one Lua script (in ``lua/``, every key passed in KEYS). Reads use HGETALL,
which never touches expiry. Every driver error becomes ``StoreUnavailable``/``StoreError``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Unpack

import redis
import redis.cluster
import redis.sentinel

from boundary.errors import StoreUnavailable
from boundary.limits import Limits
from boundary.models import CanonicalKey, CanonicalRecord, RunContext
from boundary.store import keys
from boundary.store._redis_common import record_script, script
from boundary.store._redis_common import translated as _translated

# Imported with the store, not on the first async call: importing redis.asyncio takes tens
# of milliseconds, which would stall the event loop of that call.
from boundary.store.aio import AsyncRedisStore
from boundary.store.base import (
    DEFAULT_TTL_S,
    AsyncStore,
    CanonicalStore,
    CreateResult,
    CreateTerms,
    OpenRunStatus,
    RunSummary,
    SealTerms,
    ServerFacts,
    WriteStatus,
)
from boundary.store.codec import (
    PROGRESS_FIELDS,
    create_args,
    create_result,
    decode_record,
    ms,
    raw_result,
    seal_args,
    seal_reply,
)
from boundary.store.flow_hooks import FlowHooks
from boundary.store.packing import fast_packing
from boundary.store.redis_attempts import RedisAttempts
from boundary.store.redis_facts import server_facts
from boundary.store.redis_flow import RedisFlow
from boundary.store.redis_memory import DEFAULT_MEMORY_WATERMARK, MemoryWatermark
from boundary.store.redis_pending import SCAN_COUNT, RedisPending
from boundary.store.redis_progress import RedisProgress
from boundary.store.redis_runs import RedisRuns
from boundary.store.seal_wait import NOTIFY_CLIENT_NAME, SyncSealNotifier, SyncSealWatch
from boundary.store.sentinel import is_sentinel_url, parse_sentinel_url
from boundary.store.turns import CREATE_MANY, create_many_args

logger = logging.getLogger(__name__)

#: Seconds to wait for a connection before the store counts as unavailable.
DEFAULT_CONNECT_TIMEOUT_S = 2.0
#: Seconds to wait for a reply before the store counts as unavailable.
DEFAULT_SOCKET_TIMEOUT_S = 5.0
#: Connections a store made by ``from_url`` keeps; more concurrent callers wait for one.
DEFAULT_MAX_CONNECTIONS = 100
#: Longest ``WAIT`` for replicas after a create or a seal (``wait_replicas``), ms.
DEFAULT_WAIT_TIMEOUT_MS = 100
#: Members of the runs index read per ZRANGE by ``run_ids``.
RUN_IDS_PAGE = 1000
#: Runs summarised per pipeline (``run_summaries``).
SUMMARY_BATCH = 1000

RedisClient = redis.Redis | redis.cluster.RedisCluster

#: Script sources, read once with the package.
_CREATE = record_script("create")
_STORE_RAW = record_script("store_raw")
_SEAL = record_script("seal")
_INDEX_RUN = record_script("index_run")
_READ_RECORDS = record_script("read_records")


def _sentinel_client(url: str, options: dict[str, Any]) -> redis.Redis:
    """A client of the master that the Sentinels of a ``redis+sentinel://`` URL name: each new
    connection asks them where the master is, so the store follows a failover."""
    address = parse_sentinel_url(url)
    options.pop("max_connections", None)
    timeouts = {k: v for k, v in options.items() if k.startswith("socket_")}
    # (the URL's TLS, to the Sentinels and to the master alike)
    tls = address.tls_kwargs()
    sentinel = redis.sentinel.Sentinel(list(address.sentinels), sentinel_kwargs=timeouts | tls)
    client: redis.Redis = sentinel.master_for(
        address.service,
        db=address.db,
        username=address.username,
        password=address.password,
        decode_responses=True,
        **tls,
        **options,
    )
    pool = client.connection_pool
    pool.connection_class = fast_packing(pool.connection_class)
    return client


class RedisCanonicalStore(RedisAttempts, RedisPending, RedisProgress, CanonicalStore):
    """Canonical records in Redis (or Redis Cluster), one hash per call.

    Args:
        client: a ready ``redis.Redis`` or ``redis.cluster.RedisCluster``; it must decode
            responses (``decode_responses=True``).
        ttl_s: record TTL, set once at create.
        limits: byte limits.
        clock: epoch seconds; injectable for tests.
        memory_watermark: refuse new calls (``StoreFull``, STORE_UNAVAILABLE) while the
            Redis uses this fraction of its ``maxmemory`` or more (``redis_memory``), so the
            calls already accepted keep room to finish; ``None``: never.
        wait_replicas: after a create or a seal, ``WAIT`` (same connection, same round trip)
            until this many replicas have it, at most ``wait_timeout_ms``: a failover then
            cannot lose an accepted call or a seal a caller saw (unless the wait timed out,
            which is logged). 0: no wait. A plain client only (not a cluster one).
    """

    def __init__(
        self,
        *,
        client: RedisClient,
        ttl_s: float = DEFAULT_TTL_S,
        limits: Limits | None = None,
        clock: Callable[[], float] = time.time,
        memory_watermark: float | None = DEFAULT_MEMORY_WATERMARK,
        wait_replicas: int = 0,
        wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        self.client = client
        self._cluster = isinstance(client, redis.cluster.RedisCluster)
        self.ttl_s = ttl_s
        self.limits = limits or Limits()
        self._clock = clock
        self.memory = MemoryWatermark(memory_watermark) if memory_watermark else None
        self.wait_replicas = 0 if self._cluster else wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self._create = script(client, _CREATE)
        self._create_many = script(client, CREATE_MANY)
        self._store_raw = script(client, _STORE_RAW)
        self._seal = script(client, _SEAL)
        self._index_runs = script(client, _INDEX_RUN)
        self._read_records = script(client, _READ_RECORDS)
        self._runs = RedisRuns(client, ttl_s, self._now_ms)
        #: Fleet flow control's scripts (one tool's slots, rate and line).
        self.flow_ops = RedisFlow(client)
        #: The flow control this process applies (``boundary.flow.Flow.install``): told of
        #: every seal, so a limited tool's slot is given up by whichever step sealed the call.
        self.flow: FlowHooks | None = None
        self._register_attempt_scripts()
        self._register_pending_scripts()
        self._notifier: SyncSealNotifier | None = None
        self._notifier_lock = threading.Lock()
        #: How long a command may wait for a silent Redis, seconds (the client's socket
        #: timeout); ``None``: not known (a cluster client) or no bound at all.
        self.read_timeout_s = _socket_timeout(client)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        limits: Limits | None = None,
        cluster: bool = False,
        memory_watermark: float | None = DEFAULT_MEMORY_WATERMARK,
        wait_replicas: int = 0,
        **client_options: Any,
    ) -> RedisCanonicalStore:
        """A store on ``url`` (``redis://``, ``rediss://`` or ``unix://``); with ``cluster``,
        on the Redis Cluster that ``url`` names one node of (every key of a script shares its
        run's hash slot; the one global key is only ever touched alone)."""
        client_options.setdefault("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)
        client_options.setdefault("socket_timeout", DEFAULT_SOCKET_TIMEOUT_S)
        if is_sentinel_url(url):
            return cls(
                client=_sentinel_client(url, client_options),
                ttl_s=ttl_s,
                limits=limits,
                memory_watermark=memory_watermark,
                wait_replicas=wait_replicas,
            )
        if cluster:
            client_options["decode_responses"] = True
            client_options.pop("max_connections", None)
            try:
                # Connects at once (it reads the slot map): unreachable is StoreUnavailable.
                with _translated():
                    node_client = redis.cluster.RedisCluster.from_url(url, **client_options)
            except redis.exceptions.RedisClusterException:
                raise StoreUnavailable() from None
            return cls(
                client=node_client, ttl_s=ttl_s, limits=limits, memory_watermark=memory_watermark
            )
        client_options.setdefault("max_connections", DEFAULT_MAX_CONNECTIONS)
        # redis-py's default pool raises at once when all its connections are busy, which
        # would turn a burst of concurrent calls into STORE_UNAVAILABLE. A blocking pool makes
        # the burst wait for a free connection, up to the socket timeout.
        client_options.setdefault("timeout", client_options["socket_timeout"])
        client_options["decode_responses"] = True
        pool = redis.BlockingConnectionPool.from_url(url, **client_options)
        pool.connection_class = fast_packing(pool.connection_class)
        return cls(
            client=redis.Redis(connection_pool=pool),
            ttl_s=ttl_s,
            limits=limits,
            memory_watermark=memory_watermark,
            wait_replicas=wait_replicas,
        )

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def create(self, key: CanonicalKey, **terms: Unpack[CreateTerms]) -> CreateResult:
        if self.memory is not None:
            self.memory.check(self.client)
        run_keys, argv = create_args(
            # One round trip: the script indexes the run itself, except on a cluster.
            key,
            terms,
            ttl_ms=int(self.ttl_s * 1000),
            index=not self._cluster,
        )
        with _translated():
            created, detail = self._replicated(self._create, run_keys, argv)
        result = create_result(created, detail)
        if self._cluster and result.seq is not None:
            self._index_run(key.run_id, first=result.seq == 1)
        return result

    def create_many(self, calls: Sequence[tuple[CanonicalKey, CreateTerms]]) -> list[CreateResult]:
        """The calls of one run created in ONE script (``create_many.lua``: ``create.lua``'s
        rules for each, in order) and one round trip (with ``wait_replicas``, the ``WAIT``
        rides in the same pipeline). Calls of several runs are created run by run."""
        if not calls:
            return []
        if len({key.run_id for key, _ in calls}) != 1:
            return super().create_many(calls)
        if self.memory is not None:
            self.memory.check(self.client)
        ttl_ms = int(self.ttl_s * 1000)
        run_keys, argv = create_many_args(calls, ttl_ms=ttl_ms, index=not self._cluster)
        with _translated():
            replies = self._replicated(self._create_many, run_keys, argv)
        results = [create_result(created, detail) for created, detail in replies]
        seqs = [result.seq for result in results if result.seq is not None]
        if self._cluster and seqs:
            self._index_run(calls[0][0].run_id, first=min(seqs) == 1)
        return results

    def _replicated(self, script: Any, run_keys: Sequence[str], argv: Sequence[Any]) -> Any:
        """The script's reply; with ``wait_replicas``, sent in one pipeline with a ``WAIT``,
        which counts the replicas that have this connection's writes."""
        if not self.wait_replicas:
            return script(keys=run_keys, args=argv)
        pipe = self.client.pipeline(transaction=False)
        script(keys=run_keys, args=argv, client=pipe)
        pipe.wait(self.wait_replicas, self.wait_timeout_ms)
        reply, acked = pipe.execute()
        if int(acked) < self.wait_replicas:
            logger.warning(
                "a write reached %s of %d replica(s) within %d ms",
                acked,
                self.wait_replicas,
                self.wait_timeout_ms,
            )
        return reply

    def _index_run(self, run_id: str, *, first: bool = False) -> None:
        """On a cluster (``create.lua`` cannot touch the indexes there: other hash slots),
        bumps the run in the pending-runs index, after its call is written (so a reaper never
        drops a run whose pending call is about to exist), and in the runs index (what
        ``run_ids`` reads: ``index_run.lua``). Best effort: the call is created whatever
        happens here, and a failure must not make its caller think it was not (it would
        neither dispatch it nor try again under the same id)."""
        try:
            argv: list[str | int] = [run_id, int(self.ttl_s * 1000), "1" if first else "0"]
            self._index_runs(keys=[keys.RUNS], args=argv)
        except (redis.RedisError, OSError):
            logger.warning("run %s not in the runs index (store error)", run_id)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.zincrby(keys.PENDING_RUNS, 1, run_id)
            # No immortal key: the index lives as long as the newest record (NX: a new
            # index; GT: a store with a shorter TTL never shortens it).
            pipe.pexpire(keys.PENDING_RUNS, int(self.ttl_s * 1000), nx=True)
            pipe.pexpire(keys.PENDING_RUNS, int(self.ttl_s * 1000), gt=True)
            pipe.execute()
        except (redis.RedisError, OSError):
            logger.warning("run %s not indexed for the reaper (store error)", run_id)

    def store_raw(self, key: CanonicalKey, raw: str, *, attempt: int | None = None) -> WriteStatus:
        return self._write_raw(key, raw, attempt)[0]

    def store_raw_into(
        self, record: CanonicalRecord, raw: str, *, attempt: int | None = None
    ) -> tuple[WriteStatus, CanonicalRecord | None]:
        written, at = self._write_raw(record.key, raw, attempt)
        if at is None:
            return written, None
        # Only the raw response and updated_at change while PROJECTING without one (the
        # script stored it, so neither a seal nor another raw came first).
        return written, record.model_copy(update={"raw": raw, "updated_at": at})

    def _write_raw(
        self, key: CanonicalKey, raw: str, attempt: int | None
    ) -> tuple[WriteStatus, datetime | None]:
        argv: list[str | int] = [raw, self._now_ms(), "" if attempt is None else attempt]
        with _translated():
            code = self._store_raw(keys=[keys.record_key(key)], args=argv)
        return raw_result(code)

    def seal(self, key: CanonicalKey, **terms: Unpack[SealTerms]) -> WriteStatus:
        run_keys, argv = seal_args(key, terms, now_ms=self._now_ms(), index=not self._cluster)
        with _translated():
            reply = self._replicated(self._seal, run_keys, argv)
        written, tool, attempt = seal_reply(reply)
        flow = self.flow
        if flow is not None and tool is not None:
            # Also when it was sealed already: that seal may have been this caller's, its
            # reply lost, and giving a slot up twice changes nothing. Only the slot of the
            # attempt the record names: one a newer attempt holds is never given up here.
            flow.sealed(key, tool, attempt)
        return written

    def get(self, key: CanonicalKey, *, with_raw: bool = True) -> CanonicalRecord | None:
        with _translated():
            if with_raw:
                fields: dict[str, str] = self.client.hgetall(keys.record_key(key))  # type: ignore[assignment]
            else:
                values: list[str | None] = self.client.hmget(  # type: ignore[assignment]
                    keys.record_key(key), PROGRESS_FIELDS
                )
                fields = {f: v for f, v in zip(PROGRESS_FIELDS, values, strict=True) if v}
        return decode_record(fields) if fields else None

    def ttl_ms(self, key: CanonicalKey) -> int | None:
        with _translated():
            left = int(self.client.pttl(keys.record_key(key)))
        # -2: no such key; -1: no expiry, which a record never lacks (it is not ours).
        return left if left >= 0 else None

    def server_facts(self) -> ServerFacts | None:
        """On a cluster, the worst of its primaries (``redis_facts``)."""
        with _translated():
            return server_facts(self.client)

    def now(self) -> datetime:
        with _translated():
            reply: Any = self.client.time()
        if isinstance(reply, dict):  # a cluster answers per node: any one will do
            reply = next(iter(reply.values()))
        seconds, micros = reply
        return datetime.fromtimestamp(int(seconds) + int(micros) / 1e6, tz=UTC)

    def run_ids(self, *, page: int | None = None) -> Iterator[str]:
        """The runs index's members whose newest record has not expired, in its order (by
        the expiry of the run's newest record, then id): no SCAN. The create script keeps
        the index (``keys.RUNS``); on a cluster ``index_run.lua`` does, right after the
        create. Read ``page`` members (default ``RUN_IDS_PAGE``; one ZRANGE) at a time as it
        is iterated, so the list is never held whole: a run that takes a call while the
        index is read moves to its end, and may be met twice (where it was, where it went)."""
        page = page or RUN_IDS_PAGE
        low, skip = ms(self.now()) + 1, 0
        while True:
            with _translated():
                members: list[tuple[str, float]] = self.client.zrange(  # type: ignore[assignment]
                    keys.RUNS, low, "+inf", byscore=True, offset=skip, num=page, withscores=True
                )
            for run_id, _ in members:
                yield run_id
            if len(members) < page:
                return
            # The next page starts at the last score read, past the members of that score
            # read already (ties are ordered by id).
            last = int(members[-1][1])
            same = sum(1 for _, score in members if int(score) == last)
            low, skip = last, same + skip if last == low else same

    def scanned_run_ids(self) -> Iterator[str]:
        """Every run with a live budget key, by SCAN of the keyspace (what ``run_ids`` does on
        a cluster; the benchmark times it beside the index)."""
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

    def watch_seal(self, key: CanonicalKey) -> SyncSealWatch | None:
        """A watch on the call's seal notification, for a waiting thread (``seal_wait``):
        one Pub/Sub connection per store and process. ``None`` on a RESP3 connection."""
        notifier = self._notifier
        if notifier is None:
            with self._notifier_lock:
                if self._notifier is None:
                    pool = self._pubsub_pool()
                    if str(pool.connection_kwargs.get("protocol") or 2) != "2":
                        return None
                    options = {**pool.connection_kwargs, "client_name": NOTIFY_CLIENT_NAME}
                    self._notifier = SyncSealNotifier(lambda: pool.connection_class(**options))
                notifier = self._notifier
        return notifier.watch(keys.sealed_channel(key.run_id), key.tool_call_id)

    def _pubsub_pool(self) -> Any:
        """The pool whose connection settings the seal connection takes: the client's, or a
        cluster node's (a PUBLISH reaches every node of a cluster)."""
        if self._cluster:
            node = self.client.get_default_node()  # type: ignore[union-attr]
            return node.redis_connection.connection_pool
        return self.client.connection_pool  # type: ignore[union-attr]

    def async_store(self) -> AsyncStore | None:
        """An asyncio store on the same server and DB (a plain ``redis.Redis`` client only;
        with a cluster client the async calls run the sync ones on threads)."""
        if (
            not isinstance(self.client, redis.Redis)
            or isinstance(self.client.connection_pool, redis.sentinel.SentinelConnectionPool)
            # The asyncio store does not WAIT for replicas: the sync one on threads does.
            or self.wait_replicas
        ):
            return None
        store = AsyncRedisStore.like(
            self.client, ttl_s=self.ttl_s, limits=self.limits, clock=self._clock
        )
        store.memory = self.memory
        return store


def _socket_timeout(client: RedisClient) -> float | None:
    pool = getattr(client, "connection_pool", None)
    value = getattr(pool, "connection_kwargs", {}).get("socket_timeout")
    return float(value) if isinstance(value, int | float) and value > 0 else None
