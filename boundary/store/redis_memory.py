"""Headroom on a Redis with ``maxmemory``: new calls are refused above a watermark, so the
calls already accepted can still store their raw responses and seal.

Redis with ``maxmemory-policy noeviction`` (the only policy a worker accepts) refuses writes
once it is full: without headroom, calls accepted just before would fail to store their raw
response or seal and stay PROJECTING (measured: 284 of them, on one Redis shared with the
broker). The store reads ``INFO memory`` at most once per ``MEMORY_CHECK_INTERVAL_S`` per
process while far from the watermark, before every create once near it (on a cluster, every
primary, judged by the fullest) and refuses a create while
``used_memory / maxmemory`` is at or above the watermark. A Redis without ``maxmemory`` is
never judged full here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any
from weakref import WeakKeyDictionary

import redis
import redis.asyncio as aredis
import redis.cluster

from boundary.errors import StoreUnavailable

#: A reading that got no answer: the Redis is down, paused or unreachable.
_NO_ANSWER = (redis.ConnectionError, redis.TimeoutError, OSError, asyncio.TimeoutError)
#: Fraction of ``maxmemory`` past which new calls are refused.
DEFAULT_MEMORY_WATERMARK = 0.9
#: Seconds one ``INFO memory`` reading is trusted, while the Redis is far from the watermark.
MEMORY_CHECK_INTERVAL_S = 1.0
#: Within this fraction of ``maxmemory`` below the watermark (or above it), every create reads
#: ``INFO memory`` again: a second of creates at full speed would otherwise run past it.
NEAR_WATERMARK = 0.05


class StoreFull(StoreUnavailable):
    """The store's Redis is past its memory watermark: new calls are refused
    (``STORE_UNAVAILABLE``, retryable) until it has room again."""


def used_fraction(replies: Mapping[str, Mapping[str, Any]]) -> float | None:
    """The fullest node's ``used_memory / maxmemory`` (``None``: no node has a maxmemory)."""
    fractions = [
        int(info.get("used_memory", 0)) / int(info["maxmemory"])
        for info in replies.values()
        if int(info.get("maxmemory", 0) or 0) > 0
    ]
    return max(fractions) if fractions else None


def _by_node(reply: Any) -> dict[str, Mapping[str, Any]]:
    """INFO's reply by node (redis-py answers one node, or a one-node cluster, unwrapped)."""
    if isinstance(reply, dict) and "used_memory" not in reply:
        return {str(node): info for node, info in reply.items() if isinstance(info, dict)}
    return {"": reply if isinstance(reply, dict) else {}}


class MemoryWatermark:
    """Whether the store's Redis is past ``watermark`` of its ``maxmemory``, from an
    ``INFO memory`` reading at most ``interval_s`` old.

    Args:
        watermark: fraction of ``maxmemory`` (``1.0``: only a full Redis refuses, as Redis
            itself does).
        interval_s: how long a reading is trusted.
        clock: monotonic seconds; injectable for tests.
    """

    def __init__(
        self,
        watermark: float = DEFAULT_MEMORY_WATERMARK,
        *,
        interval_s: float = MEMORY_CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < watermark <= 1:
            raise ValueError("watermark must be in (0, 1]")
        self.watermark = watermark
        self.interval_s = interval_s
        self._clock = clock
        self._read_at: float | None = None
        self._near = False
        self._full = False
        #: The asyncio reading in flight, per event loop: concurrent creates share it.
        self._areads: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[Any]] = (
            WeakKeyDictionary()
        )

    def _stale(self) -> bool:
        return (
            self._near or self._read_at is None or self._clock() - self._read_at >= self.interval_s
        )

    def _judge(self, reply: Any) -> None:
        fraction = used_fraction(_by_node(reply))
        self._full = fraction is not None and fraction >= self.watermark
        self._near = fraction is not None and fraction >= self.watermark - NEAR_WATERMARK
        self._read_at = self._clock()

    def _read_done(self, loop: asyncio.AbstractEventLoop, reading: asyncio.Task[Any]) -> None:
        if self._areads.get(loop) is reading:
            del self._areads[loop]
        if not reading.cancelled():
            reading.exception()  # retrieved: its waiters may all have been cancelled

    def check(self, client: redis.Redis | redis.cluster.RedisCluster) -> None:
        """Raises ``StoreFull`` past the watermark, and ``StoreUnavailable`` when the reading
        gets no answer: the create that follows would wait as long again for the same silence
        (a paused Redis made a submit take two socket timeouts). A reading refused with an
        error reply (``INFO`` not allowed) is not judged."""
        if self._stale():
            try:
                if isinstance(client, redis.cluster.RedisCluster):
                    reply = client.info("memory", target_nodes=redis.cluster.RedisCluster.PRIMARIES)
                else:
                    reply = client.info("memory")
            except _NO_ANSWER:
                raise StoreUnavailable() from None
            except redis.RedisError:
                return
            self._judge(reply)
        if self._full:
            raise StoreFull()

    async def acheck(self, client: aredis.Redis) -> None:
        """``check`` for an asyncio client. The creates of one loop that find the reading
        stale while one is in flight wait for that one (taken after they asked, or at most
        one round trip before) instead of each sending its own: 200 calls started at once
        send one ``INFO memory``, not 200."""
        if self._stale():
            loop = asyncio.get_running_loop()
            reading = self._areads.get(loop)
            if reading is None:
                reading = asyncio.ensure_future(client.info("memory"))
                self._areads[loop] = reading
                reading.add_done_callback(lambda done: self._read_done(loop, done))
            try:
                # Shielded: a cancelled create does not cancel the others' reading.
                reply = await asyncio.shield(reading)
            except _NO_ANSWER:
                raise StoreUnavailable() from None
            except redis.RedisError:
                return
            self._judge(reply)
        if self._full:
            raise StoreFull()
