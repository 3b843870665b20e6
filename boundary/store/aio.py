"""The store's asyncio side, on ``redis.asyncio``: what ``ToolBoundary``'s async calls need
(create, seal an error, read a record, read a run's progress: its records in one command,
watch a call's seal).

Same scripts, keys and decoding as ``RedisCanonicalStore`` (``codec``); the same driver
error translation. Made from a sync store's connection settings, one per event loop
(``redis.asyncio`` connections belong to the loop that opened them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Unpack

import redis
import redis.asyncio as aredis
import redis.asyncio.connection as aconnection
import redis.connection

from boundary.errors import ErrorCode
from boundary.limits import Limits
from boundary.models import CanonicalKey, CanonicalRecord, EvidenceStatus
from boundary.store import keys
from boundary.store._redis_common import record_script
from boundary.store._redis_common import translated as _translated
from boundary.store.base import (
    CreateResult,
    CreateTerms,
    ProgressEntry,
    SealTerms,
    WriteStatus,
)
from boundary.store.codec import (
    PROGRESS_FIELDS,
    create_args,
    create_result,
    decode_record,
    found_fields,
    in_flight_keys,
    parse_progress,
    progress_entries,
    seal_args,
    seal_result,
    with_in_flight,
)
from boundary.store.notify import SealNotifier, Watch
from boundary.store.redis_memory import MemoryWatermark
from boundary.store.resp import PubSubLink

#: The name the notifier's Pub/Sub connection gives itself (``CLIENT LIST`` shows it).
NOTIFY_CLIENT_NAME = "tool-boundary-seals"

#: Script sources, read once with the package.
_CREATE = record_script("create")
_SEAL = record_script("seal")
_READ_RECORDS = record_script("read_records")

#: Connections of the asyncio pool at most; more concurrent callers wait for one.
DEFAULT_MAX_CONNECTIONS = 100
#: Commands of one loop iteration sent in one pipeline at most.
MAX_BATCH = 256
#: Longest ``aclose`` waits for the pipelines in flight, seconds.
CLOSE_TIMEOUT_S = 1.0


class _Batcher:
    """Sends the commands asked for in one event-loop iteration as one pipeline.

    A command through ``redis.asyncio`` costs its event loop ~130 us of CPU on its own (a
    pool connection taken and given back under a lock and a condition, a timeout, the
    driver's observability hooks) and ~20 us in a pipeline. Many calls in flight ask for
    their creates and reads in the same iterations: each asks, a callback queued behind them
    sends all of them in one round trip, and each caller gets its own reply or error.
    """

    def __init__(self, client: aredis.Redis) -> None:
        self._client = client
        self._queued: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, *args: Any) -> asyncio.Future[Any]:
        """The reply of the command ``args`` (an error reply or a failure as its exception)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._flush)
        self._queued.append((args, future))
        if len(self._queued) >= MAX_BATCH:
            self._flush()
        return future

    def _flush(self) -> None:
        batch, self._queued = self._queued, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._execute(batch))
            # Kept until done: the loop holds tasks weakly.
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Sends what is queued and waits (``CLOSE_TIMEOUT_S`` at most) for the round trips
        in flight, so closing the client fails none of them halfway."""
        self._flush()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=CLOSE_TIMEOUT_S)

    async def _execute(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for args, _ in batch:
                    pipe.execute_command(*args)
                replies = await pipe.execute(raise_on_error=False)
        except BaseException as error:
            for _, future in batch:
                if future.done():
                    continue
                if isinstance(error, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)


#: Connection settings carried over from a sync client (others are sync-only internals).
_CARRIED = (
    "host",
    "port",
    "path",
    "db",
    "username",
    "password",
    "credential_provider",
    "socket_timeout",
    "socket_connect_timeout",
    "encoding",
    "encoding_errors",
    "client_name",
    "protocol",
)


def async_settings(pool: redis.ConnectionPool) -> tuple[type[Any], dict[str, Any]]:
    """The ``redis.asyncio`` connection class and settings equivalent to a sync pool's."""
    sync_kwargs = pool.connection_kwargs
    settings = {name: sync_kwargs[name] for name in _CARRIED if name in sync_kwargs}
    settings.update({k: v for k, v in sync_kwargs.items() if k.startswith("ssl_")})
    settings["decode_responses"] = True
    if "path" in settings:
        return aconnection.UnixDomainSocketConnection, settings
    if issubclass(pool.connection_class, redis.connection.SSLConnection):
        return aconnection.SSLConnection, settings
    return aconnection.Connection, settings


class AsyncRedisStore:
    """The asyncio twin of ``RedisCanonicalStore`` for one event loop.

    Args:
        connection_class: a ``redis.asyncio`` connection class.
        settings: its keyword arguments (host, port, db, timeouts...).
        ttl_s: record TTL, set once at create.
        limits: byte limits.
        max_connections: connections of its pool; more concurrent callers wait for one.
        clock: epoch seconds.
    """

    #: The sync store's memory watermark (shared, set by ``RedisCanonicalStore.async_store``).
    memory: MemoryWatermark | None = None

    def __init__(
        self,
        *,
        connection_class: type[Any],
        settings: dict[str, Any],
        ttl_s: float,
        limits: Limits,
        max_connections: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttl_s = ttl_s
        self.limits = limits
        self._clock = clock
        #: How long a command may wait for a silent Redis, seconds (``None``: no bound).
        timeout = settings.get("socket_timeout")
        self.read_timeout_s = float(timeout) if isinstance(timeout, int | float) else None
        pool = aredis.BlockingConnectionPool(
            connection_class=connection_class,
            max_connections=max_connections,
            timeout=settings.get("socket_timeout") or None,
            **settings,
        )
        self.client = aredis.Redis(connection_pool=pool)
        self._create = self.client.register_script(_CREATE)
        self._seal = self.client.register_script(_SEAL)
        self._read_records = self.client.register_script(_READ_RECORDS)
        self._batcher = _Batcher(self.client)

        use_ssl = issubclass(connection_class, aconnection.SSLConnection)

        def open_link() -> Awaitable[PubSubLink]:
            return PubSubLink.open(settings, use_ssl=use_ssl, name=NOTIFY_CLIENT_NAME)

        self.notifier = SealNotifier(open_link)

    @classmethod
    def like(
        cls,
        client: redis.Redis,
        *,
        ttl_s: float,
        limits: Limits,
        clock: Callable[[], float] = time.time,
    ) -> AsyncRedisStore:
        """An asyncio store on the same server, DB and credentials as a sync ``client``."""
        pool = client.connection_pool
        connection_class, settings = async_settings(pool)
        most = getattr(pool, "max_connections", None) or DEFAULT_MAX_CONNECTIONS
        return cls(
            connection_class=connection_class,
            settings=settings,
            ttl_s=ttl_s,
            limits=limits,
            max_connections=min(most, DEFAULT_MAX_CONNECTIONS),
            clock=clock,
        )

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def create(self, key: CanonicalKey, **terms: Unpack[CreateTerms]) -> CreateResult:
        if self.memory is not None:
            await self.memory.acheck(self.client)
        run_keys, argv = create_args(
            # A plain client (never a cluster one): the script indexes the run itself.
            key,
            terms,
            ttl_ms=int(self.ttl_s * 1000),
            index=True,
        )
        with _translated():
            try:
                reply = await self._batcher.send(
                    "EVALSHA", self._create.sha, len(run_keys), *run_keys, *argv
                )
            except redis.exceptions.NoScriptError:
                # The server lost its scripts (a restart, SCRIPT FLUSH): loaded by the call.
                reply = await self._create(keys=run_keys, args=argv)
        created, detail = reply
        return create_result(created, detail)

    async def seal_error(self, key: CanonicalKey, code: ErrorCode) -> WriteStatus:
        terms = SealTerms(evidence_status=EvidenceStatus.ERROR, error_code=code)
        run_keys, argv = seal_args(key, terms, now_ms=self._now_ms(), index=True)
        with _translated():
            reply = await self._seal(keys=run_keys, args=argv)
        return seal_result(reply)

    async def get(self, key: CanonicalKey) -> CanonicalRecord | None:
        """The record without its raw response, or ``None`` when missing or expired."""
        with _translated():
            values: list[str | None] = await self._batcher.send(
                "HMGET", keys.record_key(key), *PROGRESS_FIELDS
            )
        fields = {f: v for f, v in zip(PROGRESS_FIELDS, values, strict=True) if v}
        return decode_record(fields) if fields else None

    async def progress(self, run_id: str) -> list[ProgressEntry]:
        with _translated():
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.zrange(keys.progress_key(run_id), 0, -1, withscores=True)
                # Calls still running are in the pending set only: counted as projecting.
                pipe.zrange(keys.pending_key(run_id), 0, -1)
                members, pending = await pipe.execute()
        parsed, own = parse_progress(members, run_id)
        in_flight = in_flight_keys(pending, parsed, run_id)
        own = own + in_flight
        replies: list[list[str | None]] = []
        if own:
            # The run's records in one command (read_records.lua), as the sync store reads
            # them: not one HMGET of every field name per record.
            record_keys = [keys.record_key(own_key) for own_key in own]
            with _translated():
                try:
                    replies = await self._batcher.send(
                        "EVALSHA",
                        self._read_records.sha,
                        len(record_keys),
                        *record_keys,
                    )
                except redis.exceptions.NoScriptError:
                    # The server lost its scripts: loaded by the call.
                    replies = await self._read_records(keys=record_keys)
        found = found_fields(own, replies)
        return with_in_flight(progress_entries(parsed, found), in_flight, found)

    def watch(self, key: CanonicalKey) -> Watch:
        """A watch on the call's seal; ``attach`` it before reading the record."""
        return Watch(self.notifier, keys.sealed_channel(key.run_id), key.tool_call_id)

    async def aclose(self) -> None:
        await self.notifier.aclose()
        await self._batcher.aclose()
        await self.client.aclose()
