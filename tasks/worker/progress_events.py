"""A running call's heartbeats as Celery task events, so Flower shows how far it got.

After a heartbeat the store kept (``boundary.call_context`` tells its progress listener), the
worker sends a custom task event of type ``task-progress`` for the call's execute task:
``celery.events.state`` (and so Flower) then shows the task in the state ``PROGRESS`` with
the fields ``progress``, ``progress_message`` and ``attempt``. Flower's task page and API
show only Celery's own task fields, so the same three also ride in ``result`` as one JSON
text: Celery's convention for a custom state's details (``update_state(meta=...)``), replaced
by the real result when the task ends.

At most one event per call per ``MIN_EVENT_INTERVAL_S`` (the store writes are coalesced
already; this holds for any ``HEARTBEAT_INTERVAL_S``), and only when the worker sends task
events (``-E``, ``worker_send_task_events``, or Flower's ``enable_events``): the worker's own
event dispatcher decides, as it does for ``task-started``. The fields are the tool's progress
message (documented as agent-visible, never raw data), a fraction and a number.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

from celery import Celery

from boundary import CanonicalKey
from boundary.call_context import ProgressReport

logger = logging.getLogger(__name__)

#: The event's type; Celery shows the task's state as its upper-cased suffix, ``PROGRESS``.
EVENT_TYPE = "task-progress"
#: At most one progress event per call per this many seconds.
MIN_EVENT_INTERVAL_S = 1.0


class _Sent:
    """The execute task a call runs under in this process, and when it last sent an event."""

    __slots__ = ("hostname", "last", "task_id")

    def __init__(self, task_id: str, hostname: str | None) -> None:
        self.task_id = task_id
        self.hostname = hostname
        self.last: float | None = None


class ProgressEvents:
    """Sends ``task-progress`` events for the calls this worker process runs."""

    def __init__(self, app: Celery, clock: Any = time.monotonic) -> None:
        self.app = app
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[str, _Sent] = {}
        #: The worker of this process (``worker_init``) and the process it was made in.
        self._worker: Any = None
        self._worker_pid: int | None = None

    def attach_worker(self, worker: Any) -> None:
        self._worker, self._worker_pid = worker, os.getpid()

    def on_worker_init(self, sender: Any = None, **_: Any) -> None:
        """``worker_init``: the worker of this process is ``sender``."""
        self.attach_worker(sender)

    def running(self, key: CanonicalKey, request: Any) -> AbstractContextManager[None]:
        """While the block runs, heartbeats of ``key`` are reported for ``request``'s task
        (an object rather than a generator: this runs on every execute step)."""
        return _Running(self, key, request)

    def on_progress(self, report: ProgressReport) -> None:
        """The progress listener: one event per call per ``MIN_EVENT_INTERVAL_S`` at most."""
        now = self._clock()
        with self._lock:
            sent = self._running.get(report.key.identity)
            if sent is None or (sent.last is not None and now - sent.last < MIN_EVENT_INTERVAL_S):
                return
            sent.last = now
        self._send(sent, progress_fields(report))

    def _send(self, sent: _Sent, fields: dict[str, Any]) -> None:
        worker = self._worker
        if worker is None:
            return  # not a worker process (an in-process dispatcher runs no Celery task)
        if os.getpid() == self._worker_pid:
            # The worker's own dispatcher: it sends task events only when they are on, and
            # its connection is the one task-started and task-succeeded go through.
            consumer = getattr(worker, "consumer", None)
            dispatcher = getattr(consumer, "event_dispatcher", None)
            if dispatcher is not None:
                dispatcher.send(EVENT_TYPE, uuid=sent.task_id, **fields)
            return
        # A prefork child: the worker's connection is its parent's; one of its own.
        if not getattr(worker, "task_events", False):
            return
        with self.app.events.default_dispatcher(hostname=sent.hostname) as dispatcher:
            dispatcher.send(EVENT_TYPE, uuid=sent.task_id, **fields)


def progress_fields(report: ProgressReport) -> dict[str, Any]:
    """The event's fields: the three, and the same as one JSON text in ``result``."""
    fields: dict[str, Any] = {
        "progress": report.fraction,
        "progress_message": report.message,
        "attempt": report.attempt,
    }
    text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return fields | {"result": text}


class _Running:
    """``ProgressEvents.running``: the call's task is known from the block's start to its end."""

    __slots__ = ("_events", "_identity", "_request")

    def __init__(self, events: ProgressEvents, key: CanonicalKey, request: Any) -> None:
        self._events = events
        self._identity = key.identity
        self._request = request

    def __enter__(self) -> None:
        request = self._request
        sent = _Sent(str(request.id), getattr(request, "hostname", None))
        events = self._events
        with events._lock:
            events._running[self._identity] = sent

    def __exit__(self, *exc_info: object) -> None:
        events = self._events
        with events._lock:
            events._running.pop(self._identity, None)
