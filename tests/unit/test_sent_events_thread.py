"""``SentEvents``: a send's task-sent event published behind it, from a thread of its own;
none dropped for want of room, a failure there never raised to the sender."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery
from celery.events.state import State

from tasks.wiring.sent_events import SentEvents
from tests.support.helpers import wait_until


class Producer:
    """Records what is published on it; ``hold`` keeps a publish waiting."""

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.threads: set[int] = set()
        self.hold = threading.Event()
        self.hold.set()
        self.fail = False

    def publish(self, body: dict[str, Any], **options: Any) -> None:
        self.hold.wait(10)
        if self.fail:
            raise ConnectionError("redis://:secret@10.0.0.5:6379/0 refused")
        self.threads.add(threading.get_ident())
        self.published.append(body)


def _events(producer: Producer, max_queued: int = 100) -> SentEvents:
    app = Celery("tb-test-sent-events", broker="memory://", set_as_current=False)

    @contextmanager
    def acquire(producer_: Any = None) -> Iterator[Producer]:
        yield producer

    app.producer_or_acquire = acquire  # type: ignore[method-assign]
    return SentEvents(app, max_queued=max_queued)


FIELDS = {"uuid": "r:c:execute", "name": "boundary.execute", "queue": "tools"}


def test_the_sender_returns_before_its_event_is_published_and_flush_waits_for_it() -> None:
    # Given a producer that holds every publish
    producer = Producer()
    producer.hold.clear()
    events = _events(producer)

    # When a send hands its task-sent event over
    before = time.time()
    events.publish("task-sent", FIELDS, producer=None, retry=True)

    # Then the sender got control back with the event still unpublished, stamped with the
    # send's time, and a flush waits until the thread published it
    assert producer.published == []
    assert not events.flush(0.05)
    producer.hold.set()
    assert events.flush(10)
    [event] = producer.published
    assert event["type"] == "task-sent" and event["uuid"] == "r:c:execute"
    assert event["queue"] == "tools" and event["name"] == "boundary.execute"
    assert before <= event["timestamp"] <= time.time()
    assert producer.threads and threading.get_ident() not in producer.threads


def test_a_full_queue_publishes_on_the_sender_s_producer_rather_than_drop_the_event() -> None:
    # Given an event queue holding none
    queued = Producer()
    events = _events(queued, max_queued=0)
    own = Producer()

    # When a send hands its event over
    events.publish("task-sent", FIELDS, producer=own)

    # Then it was published at once, on the sender's own producer and thread
    assert [e["uuid"] for e in own.published] == ["r:c:execute"]
    assert own.threads == {threading.get_ident()} and queued.published == []


def test_an_event_that_cannot_be_published_is_dropped_with_a_warning_naming_no_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a broker that refuses every publish
    producer = Producer()
    producer.fail = True
    events = _events(producer)

    # When a send hands its event over
    with caplog.at_level(logging.WARNING, logger="tasks.wiring.sent_events"):
        events.publish("task-sent", FIELDS, producer=None)
        assert events.flush(10)

    # Then the sender saw nothing, the thread lives on, and the warning names no URL
    assert "could not be published" in caplog.text and "secret" not in caplog.text
    producer.fail = False
    events.publish("task-sent", {**FIELDS, "uuid": "r:c2:execute"}, producer=None)
    assert events.flush(10)
    assert [e["uuid"] for e in producer.published] == ["r:c2:execute"]


def test_a_task_sent_event_arriving_after_the_worker_s_events_does_not_move_the_state_back() -> (
    None
):
    # Given the worker's events of a task (received, started, succeeded) seen first
    state = State()
    now = time.time()
    for n, kind in enumerate(("task-received", "task-started", "task-succeeded")):
        state.event(
            {
                "type": kind,
                "uuid": "r:c:execute",
                "hostname": "w@h",
                "timestamp": now + n,
                "clock": n + 1,
                "local_received": now + n,
            }
        )

    # When the task-sent event arrives after them (it is published behind the send)
    state.event(
        {
            "type": "task-sent",
            "uuid": "r:c:execute",
            "name": "boundary.execute",
            "queue": "tools",
            "hostname": "gen1@h",
            "timestamp": now - 1,
            "clock": 4,
            "local_received": now + 4,
        }
    )

    # Then Flower's state (Celery's event state) keeps SUCCESS and learns the name and queue
    task = state.tasks["r:c:execute"]
    assert task.state == "SUCCESS"
    assert task.name == "boundary.execute" and task.sent == now - 1


def test_the_thread_ends_once_idle_and_the_next_event_starts_another() -> None:
    # Given an event published, and the thread left idle
    producer = Producer()
    events = _events(producer)
    events.publish("task-sent", FIELDS, producer=None)
    assert events.flush(10)
    wait_until(lambda: events._thread is None, "the idle thread to end", 30, every=0.05)

    # Then the thread ended (a dispatcher that stopped sending holds none), and a later event
    # is still published, by a new thread
    assert events._thread is None
    events.publish("task-sent", {**FIELDS, "uuid": "r:c2:execute"}, producer=None)
    assert events.flush(10)
    assert [e["uuid"] for e in producer.published] == ["r:c:execute", "r:c2:execute"]


def test_a_forked_child_starts_afresh_even_if_the_parent_s_thread_held_the_lock() -> None:
    # Given a parent whose event thread holds the queue's lock, with an event queued
    producer = Producer()
    events = _events(producer)
    events._ready.acquire()
    events._queue.append(("task-sent", dict(FIELDS)))

    # When the fork hook runs in the child
    from tasks.wiring import sent_events

    sent_events._reset_in_child()

    # Then the child's publish is not blocked by the parent's lock, and the parent's queued
    # event is not published twice
    events.publish("task-sent", {**FIELDS, "uuid": "child:c:execute"}, producer=None)
    assert events.flush(10)
    assert [e["uuid"] for e in producer.published] == ["child:c:execute"]


class BatchingProducer(Producer):
    """A producer with kombu's ``batch()``: records the events each batch carried; a batch
    can be made to fail when it ends (its flush)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []
        self.fail_flush = False
        self._open: list[str] | None = None

    def publish(self, body: dict[str, Any], **options: Any) -> None:
        super().publish(body, **options)
        if self._open is not None:
            self._open.append(body["uuid"])

    @contextmanager
    def batch(self) -> Iterator[None]:
        self._open = []
        try:
            yield
            if self.fail_flush:
                raise ConnectionError("redis://:secret@10.0.0.5:6379/0 reset")
            self.batches.append(self._open)
        finally:
            self._open = None


def test_events_queued_together_are_published_in_one_batch() -> None:
    # Given a producer that batches, held so that three events queue up
    producer = BatchingProducer()
    producer.hold.clear()
    events = _events(producer)
    events.publish("task-sent", {**FIELDS, "uuid": "first"}, producer=None)
    # The thread took the first one and waits on the producer
    wait_until(lambda: not events._queue, "the thread to take the first event", 10, every=0.01)
    for uuid in ("a", "b", "c"):
        events.publish("task-sent", {**FIELDS, "uuid": uuid}, producer=None)

    # When the producer answers again
    producer.hold.set()
    assert events.flush(10)

    # Then the three queued together went in one batch (one pipeline on a Redis broker)
    assert ["a", "b", "c"] in producer.batches
    assert [e["uuid"] for e in producer.published][-3:] == ["a", "b", "c"]


def test_a_failed_batch_of_events_is_published_again_one_by_one() -> None:
    # Given a producer whose batches fail when they are written
    producer = BatchingProducer()
    producer.fail_flush = True
    producer.hold.clear()
    events = _events(producer)
    events.publish("task-sent", {**FIELDS, "uuid": "first"}, producer=None)
    wait_until(lambda: not events._queue, "the thread to take the first event", 10, every=0.01)
    for uuid in ("a", "b"):
        events.publish("task-sent", {**FIELDS, "uuid": uuid}, producer=None)

    # When they are published
    producer.hold.set()
    assert events.flush(10)

    # Then each was published again on its own (with the retry policy): none is lost
    published = [e["uuid"] for e in producer.published]
    assert producer.batches == []
    assert published.count("a") == 2 and published.count("b") == 2
