"""Seal notifications for waiting threads: ONE Pub/Sub connection per store and process.

The sync twin of ``notify.py``. ``seal.lua`` publishes a call's bounded outcome, named by its
tool_call_id (``seal_message.py``), on its run's channel (``keys.sealed_channel``) once the
record is sealed: a waiter woken by it needs no read (``SyncSealWatch.sealed``). A waiting
thread watches its call (``SyncSealNotifier.watch``): the watch subscribes the run's
channel, or joins its subscription, and returns once Redis confirmed it; the waiter reads
the record after that,
never before, so a seal is either seen by that read or delivered as a message.

One reader thread opens the connection (so a waiter never blocks on a connect to a Redis
that does not answer: its confirmation wait is bounded by its own timeout) and sends the
subscriptions asked for meanwhile. One thread at a time reads it: a waiting thread when
nobody else does (it leads: woken by its seal straight from the socket, as a Celery client
draining its result backend is, with no hand-off between threads), else the reader thread,
which reads while any waiter follows; whoever reads sets the events of the waiters of each
sealed call. Waiters send their SUBSCRIBE themselves under the lock once the connection is
up (one small write).

A channel nobody watches stays subscribed for ``LINGER_S`` (the next call of the same run
then needs no round trip to be watched) and is unsubscribed after (checked every
``READ_STEP_S``, messages or not). The connection closes
when no channel is left. When it fails, every waiter is woken to re-read its record, and a
watch made after that subscribes again on a new connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any

from boundary.store.seal_channels import RECENT_MAX, SealChannel, Wake
from boundary.store.seal_message import SealMessage, call_of

logger = logging.getLogger(__name__)

#: Seconds a channel with no watcher stays subscribed (the next call of a run that an agent
#: loop makes right after the last one is watched without a round trip).
LINGER_S = 1.0
#: Shortest pause between two subscriptions of one watch after connection failures, seconds.
RETRY_S = 0.1
#: The name the seal connection gives itself (``CLIENT LIST``).
NOTIFY_CLIENT_NAME = "tb-seal-notify"
#: Longest read step of the reader, seconds (it unsubscribes idle channels between steps).
READ_STEP_S = 0.5


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SyncSealNotifier:
    """Fans seal messages out to waiting threads over one Pub/Sub connection.

    Args:
        connect: makes a new, not yet connected, redis-py ``Connection`` to the store's
            server (RESP2); called on the reader thread.
    """

    def __init__(self, connect: Any, *, linger_s: float = LINGER_S) -> None:
        self._make_connection = connect
        self._linger_s = linger_s
        self._lock = threading.Lock()
        #: Held by whoever reads the connection: a waiting thread (``_await``), or the reader.
        self._reading = threading.Lock()
        #: The events of the threads waiting for someone else to read for them (``_await``).
        self._following: list[threading.Event] = []
        #: Signalled when a thread follows while the connection has no reader.
        self._need = threading.Condition(self._lock)
        self._conn: Any = None
        self._reader: threading.Thread | None = None
        self._channels: dict[str, SealChannel] = {}
        self._pid = os.getpid()
        #: Bumped on every connection failure: watches of an older generation re-attach.
        self.generation = 0

    @property
    def channels(self) -> int:
        """Channels subscribed or being subscribed (for tests)."""
        return len(self._channels)

    def watch(self, channel: str, tool_call_id: str) -> SyncSealWatch:
        return SyncSealWatch(self, channel, tool_call_id)

    # -- used by watches, under no lock of theirs --

    def _acquire(self, channel: str, tool_call_id: str, event: Wake) -> SealChannel:
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: the parent's connection and reader are not ours.
                self._pid, self._conn, self._reader, self._channels = os.getpid(), None, None, {}
                self._reading, self._following = threading.Lock(), []
            state = self._channels.get(channel)
            if state is None:
                state = self._channels[channel] = SealChannel()
                if self._conn is not None:
                    self._send("SUBSCRIBE", channel)
            state.users += 1
            state.idle_since = None
            state.waiters.setdefault(tool_call_id, set()).add(event)
            if self._reader is None:
                self._reader = threading.Thread(
                    target=self._read_loop, name="tb-seal-reader", daemon=True
                )
                self._reader.start()
            return state

    def _join(self, channel: str, tool_call_id: str, event: Wake) -> SealChannel | None:
        """``_acquire`` of a channel already confirmed on a live connection, else ``None``."""
        with self._lock:
            state = self._live(channel)
            if state is None:
                return None
            state.users += 1
            state.idle_since = None
            state.waiters.setdefault(tool_call_id, set()).add(event)
            return state

    def _live(self, channel: str) -> SealChannel | None:
        """Under the lock: the channel's state when confirmed on a live connection."""
        state = self._channels.get(channel)
        if (
            self._pid != os.getpid()
            or self._conn is None
            or state is None
            or not state.confirmed.is_set()
        ):
            return None
        return state

    def _ticket(self, channel: str, tool_call_id: str) -> tuple[SealChannel, int, float] | None:
        """Before a call's create: the channel's subscription, if confirmed and live now
        (no round trip), with the generation and time it was seen at; ``None`` else."""
        with self._lock:
            state = self._live(channel)
            if state is None:
                return None
            # A message of an earlier record under these ids is no message of the new one.
            state.drop(tool_call_id)
            return state, self.generation, time.monotonic()

    def _cover(
        self, channel: str, tool_call_id: str, ticket: tuple[SealChannel, int, float]
    ) -> None:
        """After the call was created: its seal messages are kept for a later waiter, if the
        subscription of ``ticket`` has lasted (same connection) until now."""
        state, generation, since = ticket
        with self._lock:
            if self._live(channel) is not state or self.generation != generation:
                return
            state.covered.pop(tool_call_id, None)
            state.covered[tool_call_id] = since
            if len(state.covered) > RECENT_MAX:
                oldest = next(iter(state.covered))
                del state.covered[oldest]
                state.drop(oldest)

    def _join_covered(
        self, channel: str, tool_call_id: str, event: Wake
    ) -> tuple[SealChannel, float] | None:
        """``_join`` for a call covered on the channel's live subscription: its state and the
        time its subscription was confirmed by, with ``event`` set when its seal message came
        already; ``None`` (nothing done) when the call is not covered."""
        with self._lock:
            state = self._live(channel)
            since = None if state is None else state.covered.get(tool_call_id)
            if state is None or since is None:
                return None
            state.users += 1
            state.idle_since = None
            state.waiters.setdefault(tool_call_id, set()).add(event)
            message = state.recent.get(tool_call_id)
            if message is not None:
                event.message = message
                event.set()
            return state, since

    def _release(self, channel: str, state: SealChannel, tool_call_id: str, event: Wake) -> None:
        with self._lock:
            events = state.waiters.get(tool_call_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del state.waiters[tool_call_id]
            state.users -= 1
            if state.users == 0 and self._channels.get(channel) is state:
                state.idle_since = time.monotonic()

    def _send(self, *args: str) -> None:
        """Under the lock, with the connection up. A failed write is the reader's to see."""
        try:
            self._conn.send_command(*args, check_health=False)
        except Exception:
            logger.debug("seal subscription not sent; the reader will see the failure")

    # -- the reader thread --

    def _await(self, event: threading.Event, timeout: float | None) -> bool:
        """Waits up to ``timeout`` seconds for ``event`` (a watch's wake-up or a channel's
        confirmation); True when it is set.

        When nobody reads the connection, the waiting thread reads it itself (it leads):
        the seal message wakes it straight from the socket, with no hand-off from the reader
        thread; messages for other waiters are handed to them on the way. Else it follows:
        the thread that reads (a leading waiter, or the reader thread, which reads while
        anyone follows) sets its event. A leader that is done hands reading on to the
        reader thread when others follow."""
        if event.is_set():
            return True
        give_up = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            # Counted before trying to lead: a leader that lets go after this sees it.
            self._following.append(event)
        try:
            if self._reading.acquire(blocking=False):
                with self._lock:
                    self._following.remove(event)
                try:
                    self._lead(event, give_up)
                finally:
                    self._reading.release()
                    with self._lock:
                        self._following.append(event)
                        if self._needy():
                            self._need.notify()
            if event.is_set():
                return True
            left = None if give_up is None else give_up - time.monotonic()
            if left is not None and left <= 0:
                return False
            with self._lock:
                self._need.notify()
            return event.wait(left)
        finally:
            with self._lock:
                self._following.remove(event)

    def _needy(self) -> bool:
        """Under the lock: whether a following thread still waits for its event."""
        return any(not event.is_set() for event in self._following)

    def _still_needy(self) -> bool:
        with self._lock:
            return self._needy()

    def _lead(self, event: threading.Event, give_up: float | None) -> None:
        """Reads the connection (``_reading`` held) until ``event`` is set, ``give_up`` (a
        monotonic time) passes, or the connection is not there to read (not open yet, or
        gone): then the caller follows for the time left."""
        conn = self._conn
        if conn is None or self._pid != os.getpid():
            return
        try:
            while not event.is_set() and self._conn is conn:
                step = (
                    READ_STEP_S if give_up is None else min(give_up - time.monotonic(), READ_STEP_S)
                )
                if step <= 0:
                    return
                if conn.can_read(timeout=step):
                    self._on_reply(conn.read_response(disconnect_on_error=False, push_request=True))
        except Exception as exc:
            self._failed(conn, exc)

    def _read_loop(self) -> None:
        conn = None
        try:
            conn = self._make_connection()
            conn.connect()
            with self._lock:
                self._conn = conn
                for channel in self._channels:
                    self._send("SUBSCRIBE", channel)
            tidied = time.monotonic()
            while True:
                with self._lock:
                    if self._conn is conn and not self._needy():
                        # Nobody needs a reader: the waiters lead. Drain and tidy now and then.
                        self._need.wait(READ_STEP_S)
                    if self._conn is not conn:
                        return  # failed (seen by a leader) or closed
                with self._reading:
                    if self._conn is not conn:
                        return
                    # Read while a follower waits, else only what came meanwhile: a waiter
                    # that comes next then leads.
                    while conn.can_read(timeout=READ_STEP_S if self._still_needy() else 0):
                        self._on_reply(
                            conn.read_response(disconnect_on_error=False, push_request=True)
                        )
                        if time.monotonic() - tidied >= READ_STEP_S:
                            break
                    if time.monotonic() - tidied < READ_STEP_S:
                        continue
                    tidied = time.monotonic()
                    if self._tidy(conn):
                        return
        except Exception as exc:
            self._failed(conn, exc)

    def _on_reply(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) < 3:
            return
        kind, channel, data = (_text(part) for part in reply[:3])
        with self._lock:
            state = self._channels.get(channel)
            if state is None:
                return
            if kind == "message":
                call = call_of(data)
                if call in state.covered:
                    # Kept for a waiter that comes later (``SyncSealWatch.join_covered``).
                    state.keep(call, data)
                for event in state.waiters.get(call, ()):
                    event.message = data
                    event.set()
            elif kind == "subscribe":
                state.confirmed.set()

    def _tidy(self, conn: Any) -> bool:
        """Unsubscribes the channels idle past the linger time; True (and the connection
        closed) once no channel is left."""
        now = time.monotonic()
        with self._lock:
            idle = [
                name
                for name, state in self._channels.items()
                if state.users == 0
                and state.confirmed.is_set()
                and state.idle_since is not None
                and now - state.idle_since >= self._linger_s
            ]
            for name in idle:
                del self._channels[name]
            if idle:
                self._send("UNSUBSCRIBE", *idle)
            if self._channels:
                return False
            self._conn = self._reader = None
        conn.disconnect()
        return True

    def _failed(self, conn: Any, exc: Exception) -> None:
        """The connection broke (or never opened): wake everyone to re-read their records;
        the next watch starts afresh."""
        with self._lock:
            if self._conn is not None and self._conn is not conn:
                return  # a newer connection: this one's failure was dealt with already
            logger.warning("seal notification connection lost (%s)", type(exc).__name__)
            self._need.notify_all()
            self.generation += 1
            for state in self._channels.values():
                state.confirmed.set()
                for events in state.waiters.values():
                    for event in events:
                        event.set()
            self._channels = {}
            self._conn = self._reader = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()


class SyncSealWatch:
    """One waiter's view of one call's seal: ``with notifier.watch(...) as w: w.attach(t)``,
    read the record, then ``w.wait(t)`` (True: woken, read the record again)."""

    def __init__(self, notifier: SyncSealNotifier, channel: str, tool_call_id: str) -> None:
        self._notifier = notifier
        self._channel = channel
        self._call = tool_call_id
        self._event = Wake()
        self._state: SealChannel | None = None
        self._generation = -1
        self._attached_at = 0.0

    def attach(self, timeout: float | None) -> bool:
        """Subscribes (or joins the channel's subscription) and waits up to ``timeout`` for
        Redis to confirm it. True when confirmed. Read the record after this, never before."""
        self._detach()
        self._event.clear()
        self._event.message = None
        self._attached_at = time.monotonic()
        self._generation = self._notifier.generation
        state = self._notifier._acquire(self._channel, self._call, self._event)
        self._state = state
        return self._notifier._await(state.confirmed, timeout)

    def join_subscribed(self) -> bool:
        """Joins the channel's subscription when Redis has already confirmed it (a waiter on
        the run is there, or it lingers): no round trip. False, and nothing done, else."""
        self._detach()
        self._event.clear()
        self._event.message = None
        self._attached_at = time.monotonic()
        self._generation = self._notifier.generation
        state = self._notifier._join(self._channel, self._call, self._event)
        self._state = state
        return state is not None

    def ticket(self) -> tuple[SealChannel, int, float] | None:
        """Taken before the call's record is created (no round trip): the run's channel's
        subscription when confirmed now; hand it to ``cover`` once the record is created."""
        return self._notifier._ticket(self._channel, self._call)

    def cover(self, ticket: tuple[SealChannel, int, float] | None) -> None:
        """The call's record was created after ``ticket``: while that subscription lasts, its
        seal message is kept for a waiter that joins later (``join_covered``)."""
        if ticket is not None:
            self._notifier._cover(self._channel, self._call, ticket)

    def join_covered(self) -> bool:
        """Joins the channel's subscription when the call was covered on it (``cover``): no
        round trip, and no read needed, since none of the record's seal messages can have
        been missed (one that came already wakes the first ``wait`` at once). False, and
        nothing done, else."""
        self._detach()
        self._event.clear()
        self._event.message = None
        self._generation = self._notifier.generation
        joined = self._notifier._join_covered(self._channel, self._call, self._event)
        if joined is None:
            return False
        self._state, self._attached_at = joined
        return True

    def wait(self, timeout: float | None) -> bool:
        """Waits up to ``timeout`` seconds for the call's seal message. True when woken (a
        seal, or a lost connection): re-read the record either way. False on time."""
        if self._generation != self._notifier.generation:
            # The connection failed since: subscribe again on a new one, at most every
            # RETRY_S (a server that refuses at once must not make the caller spin).
            pause = RETRY_S - (time.monotonic() - self._attached_at)
            if pause > 0:
                time.sleep(pause if timeout is None else min(pause, max(timeout, 0.0)))
            self.attach(timeout)
            return True
        woken = self._notifier._await(self._event, timeout)
        self._event.clear()
        return woken

    def sealed(self) -> SealMessage | None:
        """The call's seal message that last woke this watch, when it names the record
        still under the call's key (``SealMessage.current``); else ``None`` (read it)."""
        data = self._event.message
        if data is None:
            return None
        message = SealMessage.parse(data)
        if message is None or message.tool_call_id != self._call:
            return None
        return message if message.current(self._attached_at) else None

    def _detach(self) -> None:
        state, self._state = self._state, None
        if state is not None:
            self._notifier._release(self._channel, state, self._call, self._event)

    def __enter__(self) -> SyncSealWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._detach()
