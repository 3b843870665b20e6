"""A run's live updates: one reader per watched run, shared by every browser watching it.

A browser on a run's page opens a server-sent event stream; the first one for a run starts
a reader that reads the run's calls (one bounded read of its progress and pending sets) once
a second while any call is in flight, every few seconds otherwise, and hands each new state
to every stream of that run. A hundred browsers on one run cost one read a second, not a
hundred; the reader stops with the run's last stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

logger = logging.getLogger(__name__)

#: Seconds between two reads of a run with calls in flight.
LIVE_INTERVAL_S = 1.0
#: Seconds between two reads of a run with nothing in flight (a new call may still come).
IDLE_INTERVAL_S = 5.0
#: Seconds after which an idle stream sends a comment (keeps proxies from closing it).
KEEP_ALIVE_S = 15.0
#: Streams open at once, over every run; more are refused (503).
MAX_STREAMS = 200

#: Reads a run's call rows (blocking; run on a thread).
RowsReader = Callable[[str], list[dict[str, Any]]]


class TooManyStreams(Exception):
    """``MAX_STREAMS`` streams are open already."""


class _Feed:
    __slots__ = ("last", "listeners", "reader")

    def __init__(self) -> None:
        self.listeners: set[asyncio.Queue[str]] = set()
        self.last: str | None = None
        self.reader: asyncio.Task[None] | None = None


def _offer(queue: asyncio.Queue[str], payload: str) -> None:
    """Each payload is a run's whole state: a stream that lags gets only the latest."""
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(payload)


class RunFeeds:
    """The readers of the runs being watched (one event loop)."""

    def __init__(
        self,
        read: RowsReader,
        *,
        live_interval_s: float = LIVE_INTERVAL_S,
        idle_interval_s: float = IDLE_INTERVAL_S,
        max_streams: int = MAX_STREAMS,
    ) -> None:
        self._read = read
        self._live_s = live_interval_s
        self._idle_s = idle_interval_s
        self._max_streams = max_streams
        self._feeds: dict[str, _Feed] = {}
        #: Reads made (for tests: one reader per run, whatever the number of streams).
        self.reads = 0

    @property
    def streams(self) -> int:
        return sum(len(feed.listeners) for feed in self._feeds.values())

    async def stream(self, run_id: str) -> AsyncIterator[str]:
        """The run's states as server-sent events, until the client goes away."""
        if self.streams >= self._max_streams:
            raise TooManyStreams()
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        feed = self._feeds.setdefault(run_id, _Feed())
        feed.listeners.add(queue)
        if feed.last is not None:
            _offer(queue, feed.last)
        if feed.reader is None:
            feed.reader = asyncio.create_task(self._run(run_id, feed))
        return self._events(run_id, feed, queue)

    async def _events(
        self, run_id: str, feed: _Feed, queue: asyncio.Queue[str]
    ) -> AsyncIterator[str]:
        try:
            while True:
                try:
                    payload = await asyncio.wait_for(queue.get(), timeout=KEEP_ALIVE_S)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                yield f"event: calls\ndata: {payload}\n\n"
        finally:
            feed.listeners.discard(queue)

    async def _run(self, run_id: str, feed: _Feed) -> None:
        try:
            while feed.listeners:
                rows = await self._rows(run_id)
                payload = json.dumps(
                    {"calls": rows} if rows is not None else {"error": "STORE_UNAVAILABLE"},
                    ensure_ascii=True,
                    separators=(",", ":"),
                )
                if payload != feed.last:
                    feed.last = payload
                    for queue in list(feed.listeners):
                        _offer(queue, payload)
                busy = rows is None or any(row["state"] != "done" for row in rows)
                await asyncio.sleep(self._live_s if busy else self._idle_s)
        finally:
            if self._feeds.get(run_id) is feed:
                del self._feeds[run_id]

    async def _rows(self, run_id: str) -> list[dict[str, Any]] | None:
        self.reads += 1
        try:
            return await asyncio.to_thread(self._read, run_id)
        except Exception as exc:
            # Only the type: a store error's text may name its URL.
            logger.warning("live view of run %s not read: %s", run_id, type(exc).__name__)
            return None

    async def aclose(self) -> None:
        for feed in list(self._feeds.values()):
            if feed.reader is not None:
                feed.reader.cancel()
        self._feeds.clear()
