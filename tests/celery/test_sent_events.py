"""A call's task-sent event (Flower's SENT state) still reaches the broker's event stream,
published behind the send: Celery's fields, the send's time, ids only; on each broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery

from boundary import RunContext, ToolBoundary, ToolCallEnvelope
from tasks.wiring.app import EXECUTE, TOOLS_QUEUE
from tests.celery.conftest import Stack
from tests.celery.event_stream import receiving

RUN = RunContext(run_id="run-sent-events", authorized_tools=frozenset({"lookup"}))


@contextmanager
def sent_events(app: Celery) -> Iterator[dict[str, dict[str, Any]]]:
    """task-sent events seen on ``app``'s broker, by task id, while the block runs."""
    seen: dict[str, dict[str, Any]] = {}
    with receiving(app, {"task-sent": lambda event: seen.setdefault(event["uuid"], event)}):
        yield seen


def _call_until_seen(boundary: ToolBoundary, seen: dict[str, dict[str, Any]]) -> tuple[str, float]:
    """Makes calls until one's task-sent event is seen (a subscription may take a moment);
    returns that call's id and the time its submit returned."""
    for n in range(20):
        call_id = f"sent-{n}"
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id=call_id, tool_name="lookup", arguments={"query": "q"}
        )
        submission = boundary.submit(envelope, RUN)
        returned = time.time()
        assert submission.accepted
        assert boundary.outcome(RUN.run_id, call_id, timeout=30).status == "READY"
        task_id = f"{RUN.run_id}:{call_id}:execute"
        give_up = time.monotonic() + 2
        # Not wait_until: a miss is no failure, the next call is tried
        while task_id not in seen and time.monotonic() < give_up:
            time.sleep(0.01)
        if task_id in seen:
            return call_id, returned
    raise AssertionError("no task-sent event of 20 calls reached the receiver")


def test_a_call_s_task_sent_event_is_published_with_celery_s_fields_and_the_send_s_time(
    stack: Stack,
) -> None:
    # Given an event receiver on the broker
    with sent_events(stack.app) as seen:
        # When calls are submitted
        call_id, returned = _call_until_seen(stack.boundary, seen)
    # Then a call's task-sent event came, as Celery builds it, stamped no later than its send
    # returned, with the ids alone as its arguments
    event = seen[f"{RUN.run_id}:{call_id}:execute"]
    assert event["name"] == EXECUTE
    assert event["queue"] == TOOLS_QUEUE and event["routing_key"] == TOOLS_QUEUE
    assert event["args"] == repr((RUN.run_id, call_id)) and event["kwargs"] == "{}"
    assert event["timestamp"] <= returned
    assert "query" not in repr(event)
