"""The app that publishes calls: the dispatcher's own, with a publish timeout.

A broker that accepts connections but never answers (a paused or swapping Redis) blocked a
publish on the socket for ever: kombu's Redis transport has no socket timeout by default, and
``broker_connection_timeout`` only bounds the connect. The publisher's connections get socket
timeouts so every publish attempt gives up; the worker's own connections keep none (a slow
Redis answer must not make a busy worker drop its broker connection).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import redis
from celery import Celery

from tasks.wiring.broker_transport import SafeAckChannel, SafeAckTransport
from tasks.wiring.transport_names import TRANSPORT_NAMES

logger = logging.getLogger(__name__)

#: Attempts of one publish (the first and ``task_publish_retry_policy``'s retries) share the
#: publish timeout between them.
_RETRY_FLOOR_S = 0.05


def publish_attempt_timeout_s(app: Celery) -> float:
    """Socket timeout of one publish attempt: the publish timeout shared by all attempts."""
    total = float(app.conf.broker_connection_timeout or 4.0)
    policy = app.conf.task_publish_retry_policy or {}
    attempts = 1 + int(policy.get("max_retries", 3))
    pauses = sum(
        min(
            policy.get("interval_start", 0) + n * policy.get("interval_step", 0.2),
            policy.get("interval_max", 0.2),
        )
        for n in range(attempts - 1)
    )
    # One wait more than attempts: a retry's fresh connection sends a command of its own
    # (measured: a paused broker otherwise took one socket timeout past the total).
    return max(float(total - pauses) / (attempts + 1), _RETRY_FLOOR_S)


class PublishUnconfirmed(Exception):
    """A publish the broker did not answer in time: the message may be queued or not.

    Not a connection error, so kombu does not publish it again: a paused broker runs every
    ``LPUSH`` it got once it wakes, and a retry that went through after it woke queued a second
    copy of the call's execute message (the chaos run: two copies ran one tool twice at once).
    The call ends ``DISPATCH_FAILED`` (sealed, so a copy that does arrive is skipped).
    """


class _PublishChannel(SafeAckChannel):
    """kombu's Redis channel, keeping one client on its connection pool for publishing.

    kombu builds a new ``redis.Redis`` per publish (and per task-sent event), each copying
    redis-py's table of ~170 response callbacks: about a fifth of a dispatch's CPU. The client
    holds no connection of its own (it borrows one from the channel's pool per command), so
    one per pool serves every publish.
    """

    _publish_client: Any = None

    def _put(self, queue: Any, message: Any, **kwargs: Any) -> None:
        try:
            super()._put(queue, message, **kwargs)
        except redis.TimeoutError:
            raise PublishUnconfirmed() from None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        kept = self._publish_client
        if kept is None or kept.connection_pool is not self.pool:
            # First use, or the pools were dropped (a reconnect): a client on the new one.
            kept = self._publish_client = self._create_client()
        yield kept


class _PublishTransport(SafeAckTransport):
    Channel = _PublishChannel


class _Publisher(Celery):  # type: ignore[misc]
    """Sends as no task's child: a call a task sends (a slot it handed on, a retry, a wake-up)
    is not that task's child, so Flower never shows another call as its Parent (Celery would
    take the parent and root ids from the task running on the sending thread)."""

    current_worker_task = None


def publisher_app(app: Celery) -> Celery:
    """A copy of ``app`` for sending only (tasks are sent by name): same broker, routes and
    serializers, with publish socket timeouts, and no result backend subscription per send
    (the waits use ``app``'s backend)."""
    publisher = _Publisher(f"{app.main}-publisher", set_as_current=False)
    conf: dict[str, Any] = {key: value for key, value in app.conf.items() if key.islower()}
    timeout = publish_attempt_timeout_s(app)
    transport = dict(conf.get("broker_transport_options") or {})
    transport.setdefault("socket_timeout", timeout)
    transport.setdefault("socket_connect_timeout", timeout)
    conf["broker_transport_options"] = transport
    conf["broker_connection_timeout"] = timeout
    # Sending never reads results: no backend, so no result subscription per send.
    conf["result_backend"] = None
    broker = conf.get("broker_url") or ""
    # The app's own Redis transport (tasks.wiring.broker_transport) or none: ours keeps its acks.
    redis_broker = urlsplit(broker).scheme in ("redis", "rediss")
    if redis_broker and conf.get("broker_transport") in {None, SafeAckTransport, *TRANSPORT_NAMES}:
        conf["broker_transport"] = _PublishTransport
    publisher.conf.update(conf)
    return publisher


#: Sends a ``PublishThread`` holds at most; past it a send runs on a default-executor thread
#: of its own, as if there were no publishing thread.
MAX_QUEUED = 10_000
#: Sends published before the thread hands their results back to the waiting loops: a
#: batch's first caller does not wait for a long batch's last publish.
SETTLE_EVERY = 16

#: A send's result: ``None`` when published, else the exception to raise to its caller.
_Done = tuple["asyncio.Future[None]", BaseException | None]


class PublishThread:
    """Publishes sends for event loops from one dedicated daemon thread.

    ``asend(publish)`` queues a blocking ``publish()`` and returns when this thread ran it
    (raising what it raised). One thread drains the queue in batches and hands each batch's
    results back to every waiting loop in one wake-up, instead of one default-executor task
    per send: fewer threads take the GIL from the event loops, and no loop wakes once per
    send. A send queued is published even when its caller stops waiting (a call recorded is
    always sent). The queue is bounded (``MAX_QUEUED``); ``close`` publishes what is queued,
    then stops the thread.
    """

    def __init__(self, name: str = "tb-publisher", max_queued: int = MAX_QUEUED) -> None:
        self._name = name
        self._queue: deque[tuple[Callable[[], None], asyncio.Future[None]]] = deque()
        self._ready = threading.Condition()
        self._room = threading.Semaphore(max_queued)
        self._thread: threading.Thread | None = None
        self._closed = False

    async def asend(self, publish: Callable[[], None]) -> None:
        """Runs ``publish`` on the publishing thread; returns or raises as it did."""
        loop = asyncio.get_running_loop()
        if not self._room.acquire(blocking=False):
            # Full: this send goes on a thread of its own (shielded, as a queued one).
            await asyncio.shield(asyncio.to_thread(publish))
            return
        future: asyncio.Future[None] = loop.create_future()
        with self._ready:
            if self._closed:
                self._room.release()
                raise RuntimeError("the publisher is closed")
            self._queue.append((publish, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._ready.notify()
        # Shielded: the send is published whatever happens to the waiter.
        await asyncio.shield(future)

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return  # closed and drained
                batch = list(self._queue)
                self._queue.clear()
            done: list[_Done] = []
            for publish, future in batch:
                try:
                    publish()
                except BaseException as error:  # handed to the caller, never lost here
                    done.append((future, error))
                else:
                    done.append((future, None))
                finally:
                    self._room.release()
                if len(done) >= SETTLE_EVERY:
                    _settle_all(done)
                    done = []
            _settle_all(done)

    def close(self, timeout: float | None = None) -> None:
        """Publishes what is queued, then ends the thread (waits up to ``timeout``)."""
        with self._ready:
            self._closed = True
            thread = self._thread
            self._ready.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


def _settle_all(done: list[_Done]) -> None:
    """Hands results back: one wake-up per event loop for the whole list."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
    for future, error in done:
        by_loop.setdefault(future.get_loop(), []).append((future, error))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[_Done]) -> None:
    for future, error in settled:
        if future.cancelled():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


#: task-sent events a ``SentEvents`` holds at most; past it an event is published on the
#: sending thread, as Celery would (none is dropped for want of room).
MAX_EVENTS_QUEUED = 10_000
#: Seconds the interpreter's exit waits for queued task-sent events to be published.
EXIT_FLUSH_S = 2.0
#: Seconds a ``SentEvents`` thread waits for another event before it ends.
IDLE_EXIT_S = 1.0


class SentEvents:
    """Publishes the ``task-sent`` events of a dispatcher's sends behind them.

    Celery publishes a send's ``task-sent`` event (Flower's SENT state) on the sending thread
    right after the task message: a second broker round trip on every caller's path, and a
    failure there raised to a caller whose task was already sent. Given to ``send_task`` as
    its ``event_dispatcher``, this object takes the event as Celery built it (queue, exchange
    and routing key included), stamps the send's time on it, and one daemon thread publishes
    the queued events in batches on the app's producer pool. The caller's send returns after
    the task message alone.

    What it costs: a worker's ``task-received`` can reach Flower before ``task-sent`` (Celery's
    event state merges a late ``task-sent`` without moving the task's state back), and events
    still queued when the process is killed are lost (a normal exit waits up to
    ``EXIT_FLUSH_S`` for them). An event that cannot be published after the publish retry
    policy is dropped with a warning: it is monitoring, the task was sent.
    """

    def __init__(self, app: Celery, max_queued: int = MAX_EVENTS_QUEUED) -> None:
        self.app = app
        self._max_queued = max_queued
        self._reset()
        _LIVE_SENT_EVENTS.add(self)

    def _reset(self) -> None:
        """A fresh queue, lock and thread: at start, and in a forked child (prefork pool),
        where the parent's lock may have been held by its thread at the fork and the queued
        events are the parent's to publish."""
        self._queue: deque[tuple[str, dict[str, Any]]] = deque()
        self._ready = threading.Condition()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._dispatcher: Any = None

    def publish(self, type: str, fields: dict[str, Any], producer: Any, **options: Any) -> None:
        """Celery's ``EventDispatcher.publish`` signature: queues the event (published on
        ``producer``, the sending thread's, only when the queue is full)."""
        fields = dict(fields, timestamp=time.time())
        with self._ready:
            if len(self._queue) < self._max_queued:
                self._queue.append((type, fields))
                self._idle.clear()
                self._start()
                self._ready.notify()
                return
        self._events().publish(type, fields, producer, **options)

    def publish_many(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        """Queues stamped events (``HeldEvents``) with one wake-up of the thread; those the
        queue has no room for are published at once, on a producer of the app's pool."""
        with self._ready:
            room = max(self._max_queued - len(self._queue), 0)
            queued, rest = events[:room], events[room:]
            if queued:
                self._queue.extend(queued)
                self._idle.clear()
                self._start()
                self._ready.notify()
        if rest:
            with self.app.producer_or_acquire() as producer:
                for type, fields in rest:
                    self._events().publish(type, fields, producer)

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every queued event was published (True) or ``timeout`` passed."""
        return self._idle.wait(timeout)

    def _events(self) -> Any:
        if self._dispatcher is None:
            # Disabled: it publishes only on the producer it is handed (as Celery's own). No
            # buffer: an event it could not publish is raised here, not kept for ever.
            self._dispatcher = self.app.events.Dispatcher(enabled=False, buffer_while_offline=False)
        return self._dispatcher

    def _start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="tb-sent-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        policy = self.app.conf.task_publish_retry_policy
        while True:
            with self._ready:
                while not self._queue:
                    self._idle.set()
                    if not self._ready.wait(IDLE_EXIT_S) and not self._queue:
                        # Idle: the thread ends (the next event starts another), so a
                        # dispatcher that stopped sending holds no thread.
                        self._thread = None
                        return
                batch = list(self._queue)
                self._queue.clear()
            try:
                self._publish_batch(batch, policy)
            except Exception:
                # The exception's text may name the broker URL: none of it is logged.
                logger.warning("%d task-sent event(s) could not be published", len(batch))

    def _publish_batch(self, batch: list[tuple[str, dict[str, Any]]], policy: Any) -> None:
        """Publishes ``batch`` in one producer batch (one pipeline, one round trip, on a
        Redis broker); if that fails, each event again with the publish retry policy (a
        batch whose reply was lost may then show twice: Flower merges a repeated event)."""
        with self.app.producer_or_acquire() as producer:
            batched = getattr(producer, "batch", None)
            if len(batch) > 1 and batched is not None:
                try:
                    with batched():
                        for type, fields in batch:
                            self._events().publish(type, fields, producer)
                    return
                except Exception:
                    logger.debug("a batch of task-sent events failed: publishing each")
            for type, fields in batch:
                self._events().publish(type, fields, producer, retry=True, retry_policy=policy)


class HeldEvents:
    """An event dispatcher that keeps the task-sent events of a batch of sends (a turn's),
    stamped with their send's time, until ``hand_to`` queues them all at once.

    Queued one by one, each event woke the ``SentEvents`` thread while the caller was still
    building the batch's next messages: the two threads took the GIL from each other, and
    a turn's publish took longer than building it alone. Held, the events go once the
    batch is written, and none goes for a batch that failed (its calls were not sent)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def publish(self, type: str, fields: dict[str, Any], producer: Any, **options: Any) -> None:
        """Celery's ``EventDispatcher.publish`` signature: keeps the event."""
        self.events.append((type, dict(fields, timestamp=time.time())))

    def hand_to(self, sent_events: Any) -> None:
        """Queues the kept events on ``sent_events`` (a ``SentEvents``, or any dispatcher)."""
        events, self.events = self.events, []
        if not events:
            return
        publish_many = getattr(sent_events, "publish_many", None)
        if publish_many is not None:
            publish_many(events)
            return
        for type, fields in events:
            sent_events.publish(type, fields, None)


#: Every ``SentEvents`` alive, for the fork and exit hooks (weakly: they hold apps).
_LIVE_SENT_EVENTS: weakref.WeakSet[SentEvents] = weakref.WeakSet()


def _reset_in_child() -> None:
    for events in list(_LIVE_SENT_EVENTS):
        events._reset()


def _flush_at_exit() -> None:
    give_up = time.monotonic() + EXIT_FLUSH_S
    for events in list(_LIVE_SENT_EVENTS):
        events.flush(max(give_up - time.monotonic(), 0.0))


os.register_at_fork(after_in_child=_reset_in_child)
atexit.register(_flush_at_exit)
