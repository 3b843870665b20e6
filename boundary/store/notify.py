"""Seal notifications for asyncio waiters: ONE Pub/Sub connection per store and event loop.

``seal.lua`` publishes a call's tool_call_id on its run's channel (``keys.sealed_channel``)
once the record is sealed. A waiter watches its call, re-reads the record when woken, and
the record decides. However many waiters (1,000 concurrent, cancelled, on the same or on
different runs), they share one connection: each channel is subscribed once, while someone
watches it, and unsubscribed when the last watcher leaves.

A subscription takes effect only when Redis confirms it; a seal published before that is
not delivered. So a watch resolves its subscription first and the waiter reads the record
after it (``Watch.attach``): a seal is either seen by that read or delivered as a message.

When the connection fails, every waiter is woken to re-read the record, subscriptions are
made again on a new connection, and nothing is lost but the failed connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any

from boundary.errors import StoreUnavailable

logger = logging.getLogger(__name__)

#: Longest ``aclose`` waits for the reader and writer to stop, seconds.
CLOSE_TIMEOUT_S = 1.0

#: Builds the (not yet connected) connection a notifier subscribes on.
ConnectionFactory = Callable[[], Any]


class _Channel:
    """One subscribed (or subscribing) channel and the futures waiting on it."""

    __slots__ = ("confirmed", "users", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        #: Resolved when Redis confirms the SUBSCRIBE (or the connection fails).
        self.confirmed: asyncio.Future[None] = loop.create_future()
        #: tool_call_id -> futures of the waiters on that call.
        self.waiters: dict[str, set[asyncio.Future[None]]] = {}
        self.users = 0


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class SealNotifier:
    """Fans seal messages out to waiters, over one Pub/Sub connection.

    Belongs to one event loop; ``AsyncRedisStore`` keeps one per store.
    """

    def __init__(self, connect: ConnectionFactory) -> None:
        self._connect = connect
        self._conn: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._channels: dict[str, _Channel] = {}
        self._outbox: list[tuple[str, str]] = []
        self._outbox_ready: asyncio.Event | None = None
        self._opening: asyncio.Lock | None = None
        self._closing: asyncio.Task[None] | None = None
        #: Bumped on every connection failure: watches of an older generation re-attach.
        self.generation = 0

    @property
    def channels(self) -> int:
        """Channels subscribed or being subscribed (for tests and metrics)."""
        return len(self._channels)

    async def _ensure_open(self) -> None:
        if self._conn is not None:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._conn is not None:
                return
            conn = self._connect()
            try:
                await conn.connect()
            except Exception:
                raise StoreUnavailable() from None
            self._conn = conn
            self._outbox_ready = asyncio.Event()
            self._tasks = [
                asyncio.create_task(self._read_loop(conn), name="tb-seal-reader"),
                asyncio.create_task(self._write_loop(conn), name="tb-seal-writer"),
            ]

    async def acquire(self, channel: str) -> _Channel:
        """The channel's state, subscribing to it when nobody watches it yet."""
        await self._ensure_open()
        state = self._channels.get(channel)
        if state is None:
            state = _Channel(asyncio.get_running_loop())
            self._channels[channel] = state
            self._send("SUBSCRIBE", channel)
        state.users += 1
        return state

    def release(self, channel: str, state: _Channel) -> None:
        """Synchronous, so it also runs on a cancelled waiter's way out."""
        state.users -= 1
        # An unconfirmed channel is unsubscribed once confirmed (``_on_reply``): its
        # confirmation must not be taken for a later SUBSCRIBE of the same channel.
        if state.users == 0 and state.confirmed.done() and self._channels.get(channel) is state:
            del self._channels[channel]
            self._send("UNSUBSCRIBE", channel)

    def _send(self, verb: str, channel: str) -> None:
        self._outbox.append((verb, channel))
        if self._outbox_ready is not None:
            self._outbox_ready.set()

    async def _write_loop(self, conn: Any) -> None:
        """Sends SUBSCRIBE/UNSUBSCRIBE in the order they were asked for, batched."""
        assert self._outbox_ready is not None
        ready = self._outbox_ready
        try:
            # Checked each time round, not only by cancellation: on Python 3.11 a cancel that
            # lands while redis-py's send (``asyncio.wait_for``) completes is swallowed.
            while self._conn is conn:
                await ready.wait()
                ready.clear()
                if self._conn is not conn:
                    return
                batch, self._outbox = self._outbox, []
                if batch:
                    packed = conn.pack_commands([list(command) for command in batch])
                    await conn.send_packed_command(packed, check_health=False)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._failed(conn)

    async def _read_loop(self, conn: Any) -> None:
        try:
            while True:
                reply = await conn.read_response(timeout=math.inf, push_request=True)
                self._on_reply(reply)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._failed(conn)

    def _on_reply(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) < 3:
            return
        kind, channel, data = (_text(part) for part in reply[:3])
        state = self._channels.get(channel)
        if state is None:
            return
        if kind == "message":
            for future in state.waiters.get(data, ()):
                _wake(future)
        elif kind == "subscribe" and not state.confirmed.done():
            state.confirmed.set_result(None)
            if state.users == 0:
                del self._channels[channel]
                self._send("UNSUBSCRIBE", channel)

    def _failed(self, conn: Any) -> None:
        """The connection broke: wake everyone to re-read, start afresh on next use."""
        if self._conn is not conn:
            return
        logger.warning("seal notification connection lost; waiters re-read their records")
        self.generation += 1
        channels, self._channels = self._channels, {}
        self._outbox = []
        self._conn = None
        for state in channels.values():
            _wake(state.confirmed)
            for futures in state.waiters.values():
                for future in futures:
                    _wake(future)
        if self._outbox_ready is not None:
            self._outbox_ready.set()  # the old writer sees the connection gone and returns
        tasks, self._tasks = self._tasks, []
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # the loop is gone (closed without ``aclose``): so is everything on it
        current = asyncio.current_task()
        for task in tasks:
            if task is not current:
                task.cancel()
        self._closing = loop.create_task(_disconnect(conn))

    async def aclose(self) -> None:
        """Stops the reader and writer and closes the connection."""
        tasks, self._tasks = self._tasks, []
        conn, self._conn = self._conn, None
        self._channels = {}
        if self._outbox_ready is not None:
            self._outbox_ready.set()  # the writer sees the connection gone and returns
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
        if conn is not None:
            await _disconnect(conn)


async def _disconnect(conn: Any) -> None:
    with contextlib.suppress(Exception):
        await conn.disconnect()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Watch:
    """One waiter's view of one call's seal. Use as ``async with notifier.watch(...)``."""

    def __init__(self, notifier: SealNotifier, channel: str, tool_call_id: str) -> None:
        self._notifier = notifier
        self._channel = channel
        self._call = tool_call_id
        self._state: _Channel | None = None
        self._future: asyncio.Future[None] | None = None
        self._generation = -1

    async def attach(self, timeout: float | None) -> None:
        """Subscribes (or joins the channel's subscription) and waits up to ``timeout`` for
        Redis to confirm it. Read the record after this, never before."""
        self._detach()
        self._generation = self._notifier.generation
        state = await self._notifier.acquire(self._channel)
        self._state = state
        self._future = asyncio.get_running_loop().create_future()
        state.waiters.setdefault(self._call, set()).add(self._future)
        if not state.confirmed.done():
            # ``asyncio.wait`` never cancels the shared future, even when this task is.
            await asyncio.wait({state.confirmed}, timeout=timeout)

    async def wait(self, timeout: float | None) -> bool:
        """Waits for the call's seal message up to ``timeout`` seconds. True when woken (a
        seal, or a lost connection: re-read the record either way), False on time."""
        if self._generation != self._notifier.generation:
            await self.attach(timeout)
            return True
        future = self._future
        assert future is not None
        if not future.done():
            await asyncio.wait({future}, timeout=timeout)
        if not future.done():
            return False
        # Woken: the next wait needs a fresh future.
        assert self._state is not None
        waiters = self._state.waiters.setdefault(self._call, set())
        waiters.discard(future)
        self._future = asyncio.get_running_loop().create_future()
        waiters.add(self._future)
        return True

    def _detach(self) -> None:
        state, future = self._state, self._future
        self._state = self._future = None
        if state is None:
            return
        if future is not None:
            waiters = state.waiters.get(self._call)
            if waiters is not None:
                waiters.discard(future)
                if not waiters:
                    del state.waiters[self._call]
            future.cancel()
        self._notifier.release(self._channel, state)

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._detach()
