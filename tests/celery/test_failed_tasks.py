"""An ERROR outcome ends its project task in FAILURE, so monitoring can find it, carrying the
error code only: no traceback in the result backend or the worker's log, no payload. The
canonical record still decides the outcome, and nothing waits long on a FAILURE result."""

from __future__ import annotations

import logging

import pytest
import redis
from celery import Celery

from boundary import ErrorCode, InvocationStatus, ToolBoundary, ToolCallEnvelope
from tasks.wiring.app import PROJECT
from tasks.wiring.failures import ToolCallFailed
from tests.celery.conftest import RUN
from tests.conftest import BACKEND_DB, REDIS_HOST, REDIS_PORT
from tests.support.celery_tools import SECRET
from tests.support.helpers import wait_until


def invoke(boundary: ToolBoundary, call_id: str, tool: str, query: str = SECRET) -> object:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments={"query": query}
    )
    return boundary.invoke(envelope, RUN, timeout=30)


def stored_result(task_id: str) -> str | None:
    """The task's result as Celery's own backend stored it, if it did."""
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=BACKEND_DB, decode_responses=True)
    return client.get(f"celery-task-meta-{task_id}")  # type: ignore[return-value]


def task_log(caplog: pytest.LogCaptureFixture, task_id: str, word: str) -> list[logging.LogRecord]:
    """The log records naming ``task_id``, once one of them holds ``word`` (the worker logs
    a task's end after it ran, maybe after the seal woke the caller)."""

    def logged() -> list[logging.LogRecord] | None:
        records = [r for r in caplog.records if task_id in r.getMessage()]
        return records if any(word in r.getMessage() for r in records) else None

    found: list[logging.LogRecord] = wait_until(logged, f"{task_id}'s {word} log line", 10)
    return found


@pytest.mark.parametrize(
    ("tool", "code"),
    [
        ("huge_raw", ErrorCode.RESULT_TOO_LARGE),
        ("boom", ErrorCode.TOOL_EXECUTION_FAILED),
        ("bad_projector", ErrorCode.PROJECTION_FAILED),
    ],
)
def test_an_error_outcome_is_a_failed_project_task_carrying_only_its_code(
    celery_boundary: ToolBoundary,
    celery_session_app: Celery,
    caplog: pytest.LogCaptureFixture,
    tool: str,
    code: ErrorCode,
) -> None:
    caplog.set_level(logging.DEBUG)
    call_id = f"failed-{tool}"

    # When a call ends ERROR
    outcome = invoke(celery_boundary, call_id, tool)

    # Then the agent gets the record's outcome: the code, at once (no wait on the FAILURE)
    assert outcome.status is InvocationStatus.ERROR  # type: ignore[attr-defined]
    assert outcome.error_code is code  # type: ignore[attr-defined]
    # And its project task ended in FAILURE with ToolCallFailed(code) and nothing else
    task_id = f"{RUN.run_id}:{call_id}:project"
    result = celery_session_app.AsyncResult(task_id)
    assert result.state == "FAILURE"
    failure = result.get(propagate=False, timeout=10)
    assert isinstance(failure, ToolCallFailed) and failure.args == (code.value,)
    assert result.traceback is None
    # And the worker logged it as an expected failure (once the task ended, which may be
    # after the seal woke the caller): no traceback attached
    project_records = task_log(caplog, task_id, "ToolCallFailed")
    assert any("ToolCallFailed" in r.getMessage() for r in project_records), [
        r.getMessage() for r in project_records
    ]
    assert all(r.exc_info is None or r.exc_info[2] is None for r in project_records)
    # And no second copy, now that the task has ended: the record is the only one
    assert stored_result(task_id) is None


def test_a_ready_outcome_is_still_a_successful_task_with_the_bounded_outcome(
    celery_boundary: ToolBoundary, celery_session_app: Celery
) -> None:
    # (not the secret: this projector echoes the query as its scope, by its own choice)
    outcome = invoke(celery_boundary, "ok-1", "lookup", query="timeouts")

    assert outcome.status is InvocationStatus.READY  # type: ignore[attr-defined]
    result = celery_session_app.AsyncResult(f"{RUN.run_id}:ok-1:project")
    assert result.state == "SUCCESS"
    assert result.get(timeout=10) == outcome.model_dump(mode="json")
    # And the task stores nothing (the failed case above checks the backend itself)
    assert celery_session_app.tasks[PROJECT].ignore_result
