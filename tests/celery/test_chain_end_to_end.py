"""End to end through real workers: Redis broker + backend with a worker thread, and once
more with RabbitMQ as the broker and a worker process. Every outcome comes back through the
project task's AsyncResult."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from boundary import (
    CanonicalKey,
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.store import keys
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tasks.wiring.failures import ToolCallFailed
from tests.celery.conftest import RUN as BASE_RUN
from tests.celery.conftest import Stack
from tests.conftest import celery_test_settings
from tests.support.helpers import create_terms

#: This test's run (``each_test_its_own_run``): a project task a test left behind (the
#: outcome of a call its execute step sealed is known before that task runs) finds no record
#: of its ids in the next test, instead of sealing that test's fresh record of the same ids
#: (it found it PROJECTING with no raw response: STORE_UNAVAILABLE).
RUN = BASE_RUN


@pytest.fixture(autouse=True)
def each_test_its_own_run() -> None:
    global RUN
    RUN = BASE_RUN.model_copy(update={"run_id": f"run-e2e-{uuid.uuid4().hex[:12]}"})


#: What ``slow`` sleeps in the timeout test: only a call that waited for its tool (not its
#: 1 s time limit) takes this long.
TOOL_WOULD_END_S = 30
#: A wait's timeout no answer "at once" comes near (only a wait that ran it out does).
LONG_WAIT_S = 120


def invoke(
    boundary: ToolBoundary,
    call_id: str,
    tool: str,
    arguments: dict[str, Any],
    run: RunContext | None = None,
) -> ToolOutcome:
    run = run or RUN
    envelope = ToolCallEnvelope(
        run_id=run.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )
    outcome = boundary.invoke(envelope, run, timeout=30)
    if outcome.error_code is not ErrorCode.DISPATCH_FAILED:
        settle(boundary, CanonicalKey(run_id=run.run_id, tool_call_id=call_id))
    return outcome


def settle(boundary: ToolBoundary, key: CanonicalKey) -> None:
    """Waits until the call's project task has ended.

    When the execute step seals the record (a timeout, a raising tool), the outcome is known
    before the project task has run. Left running, that task would act on the next test's
    record of the same ids (the store is flushed between tests) and seal it
    STORE_UNAVAILABLE, having found it PROJECTING with no raw response.
    """
    app = getattr(boundary.dispatcher, "app", None)
    if app is not None:
        with contextlib.suppress(Exception):
            app.AsyncResult(key.task_id("project")).get(timeout=30, propagate=False)


def record(call_id: str, run_id: str | None = None) -> Any:
    key = CanonicalKey(run_id=run_id or RUN.run_id, tool_call_id=call_id)
    return get_runtime().store.get(key)


def celery_result(stack: Stack, call_id: str) -> Any:
    """What the result backend holds for the project task: the outcome, as JSON, or for an
    ERROR outcome the task's failure, ``ToolCallFailed(<code>)``."""
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)
    return stack.app.AsyncResult(key.task_id("project")).get(timeout=10, propagate=False)


def assert_error(outcome: ToolOutcome, code: ErrorCode) -> None:
    assert outcome.status is InvocationStatus.ERROR
    assert outcome.evidence_status is EvidenceStatus.ERROR
    assert outcome.error_code is code
    assert outcome.result is None


def test_success_with_evidence(stack: Stack) -> None:
    # When
    outcome = invoke(stack.boundary, "c1", "lookup", {"query": "timeouts"})
    # Then the agent gets the bounded projection, and the record and the task result agree
    assert outcome.status is InvocationStatus.READY
    assert outcome.evidence_status is EvidenceStatus.EVIDENCE_FOUND
    assert outcome.result == {"count": 3, "first": "doc-0"}
    stored = record("c1")
    assert stored.status is InvocationStatus.READY
    assert stored.raw is not None and "timeouts 0" in stored.raw
    assert celery_result(stack, "c1") == outcome.model_dump(mode="json")


def test_no_evidence(stack: Stack) -> None:
    outcome = invoke(stack.boundary, "c1", "lookup", {"query": "nothing"})
    assert outcome.status is InvocationStatus.READY
    assert outcome.evidence_status is EvidenceStatus.NO_EVIDENCE
    assert outcome.scope == {"query": "nothing"}
    assert outcome.result is None


def test_executor_raises(stack: Stack) -> None:
    outcome = invoke(stack.boundary, "c1", "boom", {})
    assert_error(outcome, ErrorCode.TOOL_EXECUTION_FAILED)
    assert record("c1").raw is None
    failure = celery_result(stack, "c1")
    assert isinstance(failure, ToolCallFailed) and failure.args == ("TOOL_EXECUTION_FAILED",)


def test_projector_raises(stack: Stack) -> None:
    outcome = invoke(stack.boundary, "c1", "bad_projector", {"query": "x"})
    assert_error(outcome, ErrorCode.PROJECTION_FAILED)
    # The raw response stays Harness-only canonical data.
    assert record("c1").raw is not None


def test_invalid_evidence_status(stack: Stack) -> None:
    outcome = invoke(stack.boundary, "c1", "invalid_evidence", {"query": "x"})
    assert_error(outcome, ErrorCode.INVALID_EVIDENCE_STATUS)
    assert record("c1").agent_result is None


def test_raw_too_large(stack: Stack) -> None:
    outcome = invoke(stack.boundary, "c1", "huge_raw", {"bytes": 200_000})
    assert_error(outcome, ErrorCode.RESULT_TOO_LARGE)
    assert record("c1").raw is None


def test_agent_result_too_large(stack: Stack) -> None:
    outcome = invoke(stack.boundary, "c1", "huge_result", {"query": "q"})
    assert_error(outcome, ErrorCode.RESULT_TOO_LARGE)
    assert record("c1").agent_result is None


def test_tool_timeout(stack: Stack) -> None:
    # Given a tool with timeout_s=1 that sleeps 60 s
    started = time.monotonic()
    outcome = invoke(stack.boundary, "c1", "slow", {"seconds": TOOL_WOULD_END_S})
    # Then the call ends at its time limit, long before the tool would have
    assert_error(outcome, ErrorCode.TOOL_TIMEOUT)
    assert record("c1").raw is None
    assert time.monotonic() - started < TOOL_WOULD_END_S


def test_deadline_passed_before_start(stack: Stack) -> None:
    # Given a boundary whose clock runs a minute behind, so preflight accepts a call whose
    # run deadline has in truth already passed when a worker picks it up
    runtime = get_runtime()
    late = ToolBoundary(
        store=runtime.store,
        registry=runtime.registry,
        dispatcher=stack.boundary.dispatcher,
        clock=lambda: time.time() - 60,
    )
    run = RUN.model_copy(update={"deadline": datetime.now(UTC) - timedelta(seconds=30)})
    # When
    outcome = invoke(late, "c1", "sleepy", {"seconds": 5}, run=run)
    # Then it is sealed without running the tool (which would have kept a raw response)
    assert_error(outcome, ErrorCode.RUN_DEADLINE_EXCEEDED)
    assert record("c1").raw is None


@pytest.mark.parametrize(
    "broker", ["redis://127.0.0.1:1/0", "amqp://guest:guest@127.0.0.1:1//"], ids=["redis", "amqp"]
)
def test_broker_down_at_dispatch(
    redis_client: redis.Redis, celery_session_app: Any, broker: str
) -> None:
    # Given a dispatcher whose broker cannot be reached (the runtime configured for the test
    # tools by the session app: run alone, or first on an xdist worker, it had the defaults)
    app = create_app(celery_test_settings(broker_url=broker), name="tests_down")
    runtime = get_runtime()
    boundary = runtime.boundary(CeleryDispatcher(app))
    # When
    outcome = invoke(boundary, "c1", "lookup", {"query": "x"})
    # Then the caller gets DISPATCH_FAILED (kombu's retries are bounded: an unbounded retry
    # would never return) and no record is left PROJECTING
    assert_error(outcome, ErrorCode.DISPATCH_FAILED)
    assert record("c1").status is InvocationStatus.ERROR
    assert record("c1").error_code is ErrorCode.DISPATCH_FAILED
    assert redis_client.exists(keys.pending_key(RUN.run_id)) == 0
    # And the broker's address never reaches the outcome
    assert "127.0.0.1" not in outcome.model_dump_json()


def test_outcome_of_an_unknown_call_is_record_not_found_at_once(
    celery_boundary: ToolBoundary,
) -> None:
    started = time.monotonic()
    outcome = celery_boundary.outcome(RUN.run_id, "never-submitted", timeout=LONG_WAIT_S)
    assert_error(outcome, ErrorCode.RECORD_NOT_FOUND)
    # It did not wait its timeout out (only a wait that did reaches it)
    assert time.monotonic() - started < LONG_WAIT_S


def test_outcome_falls_back_to_the_record_when_the_celery_result_is_gone(
    celery_boundary: ToolBoundary, celery_session_app: Any
) -> None:
    # Given a finished call whose Celery result has been deleted
    first = invoke(celery_boundary, "c1", "lookup", {"query": "q"})
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="c1")
    celery_session_app.AsyncResult(key.task_id("project")).forget()
    # When its outcome is asked for again
    again = celery_boundary.outcome(RUN.run_id, "c1", timeout=5)
    # Then the record answers, with the same outcome
    assert again == first


def test_outcome_of_a_record_sealed_without_a_celery_result_does_not_wait(
    celery_boundary: ToolBoundary,
) -> None:
    # Given a record sealed by someone else than the project task (as the reaper does),
    # whose chain never ran: no Celery result will ever be written
    store = get_runtime().store
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="c1")
    created = store.create(key, **create_terms(tool_name="lookup", max_pending_s=0))
    assert created.seq == 1
    store.seal_error(key, ErrorCode.WORKER_LOST)
    # When
    started = time.monotonic()
    outcome = celery_boundary.outcome(RUN.run_id, "c1", timeout=LONG_WAIT_S)
    # Then the record answers without waiting its timeout out
    assert_error(outcome, ErrorCode.WORKER_LOST)
    assert time.monotonic() - started < LONG_WAIT_S


def test_outcome_returns_pending_while_the_call_is_still_projecting(
    celery_boundary: ToolBoundary, held_calls: threading.Event
) -> None:
    # Given a call held on the worker until the test lets it go
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id="c1", tool_name="held", arguments={"query": "q"}
    )
    assert celery_boundary.submit(envelope, RUN).accepted
    started = time.monotonic()
    pending = celery_boundary.outcome(RUN.run_id, "c1", timeout=0.5)
    # the wait ran out (not before its timeout): the call's real state comes back, never an
    # exception
    assert time.monotonic() - started > 0.495
    assert pending.pending
    assert (pending.status, pending.error_code, pending.result) == ("PROJECTING", None, None)
    # and the call still ends normally once it is let go
    held_calls.set()
    assert celery_boundary.outcome(RUN.run_id, "c1", timeout=30).status is InvocationStatus.READY
