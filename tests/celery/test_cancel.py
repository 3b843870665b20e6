"""Cancel through a real worker: the record is sealed CANCELLED at once, the tool's later
return changes nothing, and queued work of a cancelled call is revoked unstarted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import signals

from boundary import (
    CanonicalKey,
    ErrorCode,
    InvocationStatus,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from tasks.runtime import get_runtime
from tests.celery.conftest import RUN


class TaskEvents:
    """Task ids the in-process worker started, finished and revoked (Celery signals)."""

    def __init__(self) -> None:
        self.started: set[str] = set()
        self.finished: set[str] = set()
        self.revoked: set[str] = set()
        self.changed = threading.Condition()

    def _add(self, where: set[str], task_id: str | None) -> None:
        with self.changed:
            where.add(task_id or "")
            self.changed.notify_all()

    def on_prerun(self, task_id: str | None = None, **_: Any) -> None:
        self._add(self.started, task_id)

    def on_postrun(self, task_id: str | None = None, **_: Any) -> None:
        self._add(self.finished, task_id)

    def on_revoked(self, request: Any = None, **_: Any) -> None:
        self._add(self.revoked, getattr(request, "id", None))

    def wait_for(self, where: set[str], task_id: str, timeout: float = 20.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: task_id in where, timeout=timeout)


@pytest.fixture
def events() -> Iterator[TaskEvents]:
    seen = TaskEvents()
    signals.task_prerun.connect(seen.on_prerun, weak=False)
    signals.task_postrun.connect(seen.on_postrun, weak=False)
    signals.task_revoked.connect(seen.on_revoked, weak=False)
    yield seen
    signals.task_prerun.disconnect(seen.on_prerun)
    signals.task_postrun.disconnect(seen.on_postrun)
    signals.task_revoked.disconnect(seen.on_revoked)


def submit(boundary: ToolBoundary, call_id: str, tool: str, arguments: dict[str, Any]) -> None:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )
    assert boundary.submit(envelope, RUN).accepted


def key(call_id: str) -> CanonicalKey:
    return CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)


def test_cancelling_a_running_call_is_final_when_the_tool_returns(
    celery_boundary: ToolBoundary, events: TaskEvents
) -> None:
    # Given a slow tool that a worker is running
    submit(celery_boundary, "c-run", "sleepy", {"seconds": 1.5})
    assert events.wait_for(events.started, key("c-run").task_id("execute"))
    # When the call is cancelled
    outcome = celery_boundary.cancel(RUN.run_id, "c-run")
    # Then it is CANCELLED at once
    assert outcome == ToolOutcome.error("c-run", ErrorCode.CANCELLED)
    # When the tool returns afterwards
    assert events.wait_for(events.finished, key("c-run").task_id("execute"))
    # Then the record still says CANCELLED and keeps no raw response
    record = get_runtime().store.get(key("c-run"))
    assert record is not None
    assert record.status is InvocationStatus.ERROR
    assert record.error_code is ErrorCode.CANCELLED
    assert record.raw is None
    assert celery_boundary.outcome(RUN.run_id, "c-run", timeout=5) == outcome


def test_cancelling_a_queued_call_revokes_its_work_unstarted(
    celery_boundary: ToolBoundary, events: TaskEvents, held_calls: threading.Event
) -> None:
    # Given every worker thread busy with a call held until the test lets it go, and one
    # more call queued behind them
    for n in range(8):
        submit(celery_boundary, f"busy-{n}", "held", {"n": n})
    submit(celery_boundary, "c-queued", "lookup", {"query": "timeouts"})
    # When the queued call is cancelled before a thread frees up (none can: they are held)
    outcome = celery_boundary.cancel(RUN.run_id, "c-queued")
    held_calls.set()
    # Then its execute task is revoked when its turn comes, and its tool never runs
    assert outcome.error_code is ErrorCode.CANCELLED
    execute_id = key("c-queued").task_id("execute")
    assert events.wait_for(events.revoked, execute_id)
    time.sleep(0.2)
    assert execute_id not in events.started
    # And the busy calls were not disturbed
    for n in range(8):
        done = celery_boundary.outcome(RUN.run_id, f"busy-{n}", timeout=20)
        assert done.status is InvocationStatus.READY


def test_closing_a_run_cancels_its_running_calls_for_good(
    celery_boundary: ToolBoundary, events: TaskEvents, held_calls: threading.Event
) -> None:
    # Given an open run (as the MCP server keeps it) with a call its worker is running
    assert celery_boundary.open_run(RUN).is_open
    submit(celery_boundary, "c-close", "held", {"n": 1})
    assert events.wait_for(events.started, key("c-close").task_id("execute"))
    # When the run is closed, and the tool returns afterwards
    assert celery_boundary.close_run(RUN.run_id) is True
    held_calls.set()
    assert events.wait_for(events.finished, key("c-close").task_id("execute"))
    # Then the call ended CANCELLED and stays so: the tool's return changed nothing
    outcome = celery_boundary.outcome(RUN.run_id, "c-close", timeout=5)
    assert outcome == ToolOutcome.error("c-close", ErrorCode.CANCELLED)
    record = get_runtime().store.get(key("c-close"))
    assert record is not None and record.raw is None
