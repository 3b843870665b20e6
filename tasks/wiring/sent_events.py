"""``SentEvents`` and ``HeldEvents``: a dispatcher's task-sent events (Flower's SENT),
published behind its sends from a thread of their own, off the caller's path.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import deque
from typing import Any

from celery import Celery

logger = logging.getLogger(__name__)

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
