"""A call's task-sent event (Flower's SENT state) still reaches the broker's event stream,
published behind the send: Celery's fields, the send's time, ids only."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from boundary import RunContext, ToolBoundary, ToolCallEnvelope
from tasks.app import EXECUTE, TOOLS_QUEUE

RUN = RunContext(run_id="run-sent-events", authorized_tools=frozenset({"lookup"}))


@pytest.fixture
def sent_events(celery_session_app: Celery) -> Iterator[dict[str, dict[str, Any]]]:
    """task-sent events seen on the broker, by task id, while the test runs."""
    seen: dict[str, dict[str, Any]] = {}
    ready = threading.Event()
    with celery_session_app.connection_for_read() as connection:
        receiver = celery_session_app.events.Receiver(
            connection, handlers={"task-sent": lambda event: seen.setdefault(event["uuid"], event)}
        )

        started = receiver.on_consume_ready

        def on_consume_ready(*args: Any, **kwargs: Any) -> None:
            started(*args, **kwargs)
            ready.set()

        receiver.on_consume_ready = on_consume_ready  # type: ignore[method-assign]

        def consume() -> None:
            receiver.capture(limit=None, timeout=None, wakeup=False)

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        assert ready.wait(10), "the event receiver never started consuming"
        yield seen
        receiver.should_stop = True
        thread.join(10)


def test_a_call_s_task_sent_event_is_published_with_celery_s_fields_and_the_send_s_time(
    celery_boundary: ToolBoundary, sent_events: dict[str, dict[str, Any]]
) -> None:
    # Given an event receiver on the broker (a subscription may take a moment: calls are
    # made until one's event is seen)
    for n in range(20):
        call_id = f"sent-{n}"
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id=call_id, tool_name="lookup", arguments={"query": "q"}
        )
        # When a call is submitted
        submission = celery_boundary.submit(envelope, RUN)
        returned = time.time()
        assert submission.accepted
        assert celery_boundary.outcome(RUN.run_id, call_id, timeout=30).status == "READY"
        task_id = f"{RUN.run_id}:{call_id}:execute"
        give_up = time.monotonic() + 2
        while task_id not in sent_events and time.monotonic() < give_up:
            time.sleep(0.01)
        if task_id in sent_events:
            break
    else:
        raise AssertionError("no task-sent event of 20 calls reached the receiver")

    # Then its task-sent event came, as Celery builds it, stamped no later than the send
    # returned, with the ids alone as its arguments
    event = sent_events[task_id]
    assert event["name"] == EXECUTE
    assert event["queue"] == TOOLS_QUEUE and event["routing_key"] == TOOLS_QUEUE
    assert event["args"] == repr((RUN.run_id, call_id)) and event["kwargs"] == "{}"
    assert event["timestamp"] <= returned
    assert "query" not in repr(event)
