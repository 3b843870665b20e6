"""A worker's task events, sent at most once per ``worker_events_flush_ms``.

Celery buffers a worker's task events (``task-received``, ``-started``, ``-succeeded``...)
and, with an event loop (the Redis and AMQP transports have one), sends what is buffered at
the loop's next turn: under load that is one ``PUBLISH`` for nearly every event, about three
round trips a task, six a chained call. This consumer step spaces those sends: the first
event after a quiet spell goes out at the loop's next turn as before, and the ones after it
wait at most ``worker_events_flush_ms`` and leave together as one ``task.multi`` message,
which Flower and every Celery event receiver take event by event. Nothing is dropped: a
buffer of ``buffer_limit`` events is sent at once (Celery's own rule), and the consumer's stop
sends what is left. ``0``: Celery's own behaviour. Registered in ``tasks.worker.signals``.
"""

from __future__ import annotations

import time
from typing import Any

from celery import bootsteps
from vine import promise

from tasks.runtime import get_runtime


class SpacedEventFlush(bootsteps.StartStopStep):  # type: ignore[misc]
    """Consumer step: the event dispatcher's buffered task events go out at most once per
    interval (see the module)."""

    requires = ("celery.worker.consumer.events:Events",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.interval_s = 0.0
        self.sent_at = 0.0
        self.timer: Any = None

    def start(self, c: Any) -> None:
        self.interval_s = get_runtime().settings.worker_events_flush_ms / 1000
        if c.hub is None or self.interval_s <= 0:
            return
        self.timer = None
        # What the dispatcher's "an event was buffered" callback schedules, on the loop.
        c._flush_events_promise = promise(self._flush_soon, (c,))

    def _flush_soon(self, c: Any) -> None:
        """On the event loop: sends now if the last send is an interval old, else once it
        is (one timer at a time)."""
        if self.timer is not None:
            return
        wait = self.sent_at + self.interval_s - time.monotonic()
        if wait > 0:
            self.timer = c.hub.call_later(wait, self._flush, c)
            return
        self._flush(c)

    def _flush(self, c: Any) -> None:
        self.timer = None
        self.sent_at = time.monotonic()
        if c.event_dispatcher is not None:
            c.event_dispatcher.flush()

    def stop(self, c: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self._flush(c)
