"""Heartbeats become ``task-progress`` events: at most one a second per call, only through a
dispatcher that sends task events, and ``celery.events.state`` reads them as PROGRESS."""

from __future__ import annotations

import json
from typing import Any

from celery import Celery
from celery.events.dispatcher import EventDispatcher
from celery.events.state import State

from boundary import CanonicalKey
from boundary.call_context import ProgressReport
from tasks.worker.progress_events import EVENT_TYPE, ProgressEvents, progress_fields

KEY = CanonicalKey(run_id="run-1", tool_call_id="call-1")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingDispatcher(EventDispatcher):
    """Celery's dispatcher, with what it would publish kept instead of sent."""

    def __init__(self, groups: list[str] | None) -> None:
        super().__init__(connection=None, hostname="w@h", enabled=True, groups=groups)
        self.published: list[tuple[str, dict[str, Any]]] = []

    def _publish(self, event: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        self.published.append((event["type"], event))

    def enable(self) -> None:  # no connection, no producer
        self.enabled = True


class Worker:
    def __init__(self, dispatcher: EventDispatcher) -> None:
        self.consumer = type("Consumer", (), {"event_dispatcher": dispatcher})()


def report(fraction: float, message: str = "m") -> ProgressReport:
    return ProgressReport(KEY, "crawl", 2, fraction, message)


def events_with(groups: list[str] | None) -> tuple[ProgressEvents, CountingDispatcher, Clock]:
    clock = Clock()
    events = ProgressEvents(Celery(set_as_current=False), clock=clock)
    dispatcher = CountingDispatcher(groups)
    events.attach_worker(Worker(dispatcher))
    return events, dispatcher, clock


def test_at_most_one_event_a_second_per_call_with_the_latest_values() -> None:
    events, dispatcher, clock = events_with(groups=None)
    request = type("Request", (), {"id": "run-1:call-1:execute", "hostname": "w@h"})()
    with events.running(KEY, request):
        for n, at in enumerate((0.0, 0.3, 0.9, 1.0, 1.5, 2.2)):
            clock.now = at
            events.on_progress(report(n / 10))
    clock.now = 9.0
    events.on_progress(report(0.9))  # the block ended: the call is not running here any more
    sent = [fields for type_, fields in dispatcher.published if type_ == EVENT_TYPE]
    assert [f["progress"] for f in sent] == [0.0, 0.3, 0.5]
    assert sent[0]["uuid"] == "run-1:call-1:execute"
    assert sent[0]["attempt"] == 2


def test_no_event_when_the_worker_sends_no_task_events_or_runs_no_such_call() -> None:
    events, dispatcher, _ = events_with(groups=["worker"])  # what a worker without -E has
    request = type("Request", (), {"id": "t", "hostname": "w@h"})()
    with events.running(KEY, request):
        events.on_progress(report(0.5))
    events.on_progress(report(0.7))  # not running here any more
    assert dispatcher.published == []


def test_events_state_shows_progress_with_its_fields_in_the_result() -> None:
    state = State()
    base = {"uuid": "t1", "hostname": "w@h", "timestamp": 1.0, "local_received": 1.0, "clock": 1}
    state.event({"type": "task-received", "name": "tool_boundary.execute", **base})
    state.event({"type": "task-started", **base})
    state.event({"type": EVENT_TYPE, **base, **progress_fields(report(0.25, "page 1 of 4"))})
    task = state.tasks["t1"]
    assert task.state == "PROGRESS"
    assert (task.progress, task.progress_message, task.attempt) == (0.25, "page 1 of 4", 2)
    assert json.loads(task.as_dict()["result"]) == {
        "attempt": 2,
        "progress": 0.25,
        "progress_message": "page 1 of 4",
    }
