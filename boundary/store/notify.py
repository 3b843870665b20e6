"""Seal notifications for asyncio waiters: ONE Pub/Sub connection per store and event loop.

``seal.lua`` publishes a call's bounded outcome, named by its tool_call_id
(``seal_message.py``), on its run's channel (``keys.sealed_channel``) once the record is
sealed. A waiter watches its call; woken by its seal message it has the outcome
(``Watch.sealed``), woken otherwise it re-reads the record, and the record decides.
However many waiters (1,000 concurrent, cancelled, on the same or on different runs),
they share one connection: each channel is subscribed once, while someone watches it,
and unsubscribed when the last watcher leaves.

A subscription takes effect only when Redis confirms it; a seal published before that is
not delivered. So a watch resolves its subscription first and the waiter reads the record
after it (``Watch.attach``): a seal is either seen by that read or delivered as a message.

When the connection fails, every waiter is woken to re-read the record, subscriptions are
made again on a new connection, and nothing is lost but the failed connection. The
connection lives only while someone waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from boundary.errors import StoreUnavailable
from boundary.store.resp import PubSubLink, ReplyError
from boundary.store.seal_message import SealMessage, call_of

logger = logging.getLogger(__name__)

#: Longest ``aclose`` waits for the reader to stop, seconds.
CLOSE_TIMEOUT_S = 1.0

#: Opens the notifier's link (connected, authenticated, named).
LinkOpener = Callable[[], Awaitable[PubSubLink]]


class _Channel:
    """One subscribed (or subscribing) channel and the futures waiting on it."""

    __slots__ = ("confirmed", "users", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        #: Resolved when Redis confirms the SUBSCRIBE (or the connection fails).
        self.confirmed: asyncio.Future[None] = loop.create_future()
        #: tool_call_id -> futures of the waiters on that call (resolved with the seal
        #: message that woke them, or ``None`` for a lost connection).
        self.waiters: dict[str, set[asyncio.Future[str | None]]] = {}
        self.users = 0


def _wake(future: asyncio.Future[Any], message: str | None = None) -> None:
    if not future.done():
        future.set_result(message)


class SealNotifier:
    """Fans seal messages out to waiters, over one Pub/Sub connection.

    Belongs to one event loop; ``AsyncRedisStore`` keeps one per store. The connection and
    its reader task exist only while someone waits: when the last watch ends they close in
    the same step, so a loop that ends right after its last wait has nothing of ours left.
    """

    def __init__(self, open_link: LinkOpener) -> None:
        self._open_link = open_link
        self._link: PubSubLink | None = None
        self._reader: asyncio.Task[None] | None = None
        self._channels: dict[str, _Channel] = {}
        #: Watches attached now, over every channel.
        self._users = 0
        self._opening: asyncio.Lock | None = None
        #: Bumped on every connection failure: watches of an older generation re-attach.
        self.generation = 0

    @property
    def channels(self) -> int:
        """Channels subscribed or being subscribed (for tests and metrics)."""
        return len(self._channels)

    @property
    def connected(self) -> bool:
        return self._link is not None

    async def _ensure_open(self) -> PubSubLink:
        if self._link is not None:
            return self._link
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._link is None:
                try:
                    link = await self._open_link()
                except (OSError, ReplyError, TimeoutError):
                    raise StoreUnavailable() from None
                self._link = link
                self._reader = asyncio.create_task(self._read_loop(link), name="tb-seal-reader")
            return self._link

    async def acquire(self, channel: str) -> _Channel:
        """The channel's state, subscribing to it when nobody watches it yet."""
        link = await self._ensure_open()
        state = self._channels.get(channel)
        if state is None:
            state = _Channel(asyncio.get_running_loop())
            self._channels[channel] = state
            link.send("SUBSCRIBE", channel)
        state.users += 1
        self._users += 1
        return state

    def release(self, channel: str, state: _Channel) -> None:
        """Synchronous, so it also runs on a cancelled waiter's way out."""
        state.users -= 1
        if self._channels.get(channel) is not state:
            return  # a channel of a connection that failed since
        self._users -= 1
        if self._users == 0:
            self._close()  # nobody waits any more: no connection, no task left behind
        elif state.users > 0:
            return
        elif state.confirmed.done():
            # An unconfirmed channel is unsubscribed once confirmed (``_on_reply``): its
            # confirmation must not be taken for a later SUBSCRIBE of the same channel.
            del self._channels[channel]
            if self._link is not None:
                self._link.send("UNSUBSCRIBE", channel)

    async def _read_loop(self, link: PubSubLink) -> None:
        try:
            while True:
                self._on_reply(await link.read())
        except asyncio.CancelledError:
            raise
        except Exception:
            self._failed(link)

    def _on_reply(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) < 3:
            return
        kind, channel, data = (str(part) for part in reply[:3])
        state = self._channels.get(channel)
        if state is None:
            return
        if kind == "message":
            for future in state.waiters.get(call_of(data), ()):
                _wake(future, data)
        elif kind == "subscribe" and not state.confirmed.done():
            state.confirmed.set_result(None)
            if state.users == 0:
                del self._channels[channel]
                if self._link is not None:
                    self._link.send("UNSUBSCRIBE", channel)

    def _failed(self, link: PubSubLink) -> None:
        """The connection broke: wake everyone to re-read, start afresh on next use."""
        if self._link is not link:
            return
        logger.warning("seal notification connection lost; waiters re-read their records")
        self.generation += 1
        for state in self._channels.values():
            _wake(state.confirmed)
            for futures in state.waiters.values():
                for future in futures:
                    _wake(future)
        self._close()

    def _close(self) -> None:
        """Drops the connection and its reader at once (the reader ends on its next step)."""
        link, self._link = self._link, None
        reader, self._reader = self._reader, None
        self._channels = {}
        self._users = 0
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        if link is not None:
            link.close()

    async def aclose(self) -> None:
        """Closes the connection, if open, and waits for its reader to end."""
        reader = self._reader
        self._close()
        if reader is not None and reader is not asyncio.current_task():
            await asyncio.wait({reader}, timeout=CLOSE_TIMEOUT_S)


class Watch:
    """One waiter's view of one call's seal. Use as ``async with notifier.watch(...)``."""

    def __init__(self, notifier: SealNotifier, channel: str, tool_call_id: str) -> None:
        self._notifier = notifier
        self._channel = channel
        self._call = tool_call_id
        self._state: _Channel | None = None
        self._future: asyncio.Future[str | None] | None = None
        self._generation = -1
        self._attached_at = 0.0
        #: The seal message that last woke this watch (``None``: none).
        self._message: str | None = None

    async def attach(self, timeout: float | None) -> None:
        """Subscribes (or joins the channel's subscription) and waits up to ``timeout`` for
        Redis to confirm it. Read the record after this, never before."""
        self._detach()
        self._message = None
        self._attached_at = time.monotonic()
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
        if not future.cancelled():
            self._message = future.result()
        assert self._state is not None
        waiters = self._state.waiters.setdefault(self._call, set())
        waiters.discard(future)
        self._future = asyncio.get_running_loop().create_future()
        waiters.add(self._future)
        return True

    def sealed(self) -> SealMessage | None:
        """The call's seal message that last woke this watch, when it names the record
        still under the call's key (``SealMessage.current``); else ``None`` (read it)."""
        if self._message is None:
            return None
        message = SealMessage.parse(self._message)
        if message is None or message.tool_call_id != self._call:
            return None
        return message if message.current(self._attached_at) else None

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
