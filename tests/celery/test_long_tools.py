"""Long-running tools on a real worker (the in-process worker thread): progress while they
run, cancellation that stops them, retries of timed-out attempts on the same record, a hung
tool bounded by its own concurrency, and tools routed to a queue of their own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import (
    CallProgress,
    CanonicalKey,
    ErrorCode,
    InvocationStatus,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.store import keys
from boundary.tool_threads import tool_threads
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support import celery_tools
from tests.support.helpers import wait_until

#: Longest any wait here may take before the test fails (a bound, never a timing claim).
PATIENCE_S = 30.0


def submit(boundary: ToolBoundary, call_id: str, tool: str, arguments: dict) -> CanonicalKey:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )
    submission = boundary.submit(envelope, RUN)
    assert submission.accepted, submission
    assert submission.key is not None
    return submission.key


@pytest.fixture
def gates() -> Iterator[None]:
    celery_tools.BEAT_GATE.clear()
    yield
    celery_tools.BEAT_GATE.set()


def test_progress_of_a_running_tool_is_visible_in_its_pending_outcome(
    celery_boundary: ToolBoundary, gates: None
) -> None:
    # Given a tool that reported half done and keeps heartbeating
    submit(celery_boundary, "p1", "beat_until_set", {})

    def progressed() -> CallProgress | None:
        outcome = celery_boundary.outcome(RUN.run_id, "p1", timeout=0.05)
        assert outcome.pending, outcome
        return outcome.progress if outcome.progress and outcome.progress.fraction else None

    # When its caller asks for the outcome while it runs
    progress = wait_until(progressed, "the tool's progress")
    # Then the pending outcome carries the tool's progress, with the store's times
    assert progress.fraction == 0.5
    assert progress.message == "half way: 5 of 10 pages"
    assert progress.attempt == 1
    assert progress.started_at is not None and progress.heartbeat_at is not None
    assert progress.heartbeat_at >= progress.started_at

    # And the async wait says the same
    async def ask() -> ToolOutcome:
        try:
            return await celery_boundary.aoutcome(RUN.run_id, "p1", timeout=0.05)
        finally:
            await celery_boundary.aclose()

    async_pending = asyncio.run(ask())
    assert async_pending.pending and async_pending.progress is not None
    assert async_pending.progress.message == "half way: 5 of 10 pages"
    # And the agent's text says the same, nothing more
    text = celery_boundary.outcome(RUN.run_id, "p1", timeout=0.05).as_text()
    assert '"fraction":0.5' in text and "half way" in text
    # And once the tool returns, the sealed outcome carries no progress
    celery_tools.BEAT_GATE.set()
    done = celery_boundary.outcome(RUN.run_id, "p1", timeout=PATIENCE_S)
    assert done.status is InvocationStatus.READY, done
    assert done.progress is None


def test_cancel_stops_a_heartbeating_tool_within_one_heartbeat(
    celery_boundary: ToolBoundary, tmp_path: Path
) -> None:
    # (an id no other test uses: the worker remembers the task ids a cancel revoked)
    interval_s = get_runtime().settings.heartbeat_interval_s
    step_s = 0.05
    # Given a heartbeating tool that leaves a file per step
    submit(
        celery_boundary,
        "stop1",
        "beating",
        {"steps": 10_000, "step_s": step_s, "dir": str(tmp_path)},
    )
    wait_until(lambda: len(list(tmp_path.glob("stop1-1-*"))) >= 3, "the tool's first steps")
    # When the call is cancelled
    cancelled = celery_boundary.cancel(RUN.run_id, "stop1")
    steps_at_cancel = len(list(tmp_path.glob("stop1-1-*")))
    assert cancelled.error_code is ErrorCode.CANCELLED
    # Then the tool leaves at its next stored heartbeat (CallCancelled), its thread freed
    exit_file = tmp_path / "stop1-1-exit"
    wait_until(exit_file.exists, "the tool to stop")
    assert exit_file.read_text() == "cancelled"
    steps_after = len(list(tmp_path.glob("stop1-1-*"))) - 1 - steps_at_cancel
    # at most one heartbeat interval's worth of steps ran after the cancel (sleeps only
    # stretch under load, so a slow machine runs fewer, never more)
    assert steps_after <= interval_s / step_s + 2, steps_after
    # And no side effect after it left
    time.sleep(4 * step_s)
    assert len(list(tmp_path.glob("stop1-1-*"))) - 1 - steps_at_cancel == steps_after
    # And the record stays CANCELLED, with no raw response
    record = get_runtime().store.get(CanonicalKey(run_id=RUN.run_id, tool_call_id="stop1"))
    assert record is not None and record.error_code is ErrorCode.CANCELLED
    assert record.raw is None
    print(f"cancel: {steps_after} step(s) of {step_s}s after the cancel (interval {interval_s}s)")


def test_a_timed_out_attempt_is_retried_on_the_same_record_and_counted_once(
    celery_boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    # Given a read-only tool whose first attempt overruns and whose policy allows two
    key = submit(celery_boundary, "r1", "slow_first_time", {})
    # When its outcome is awaited
    outcome = celery_boundary.outcome(RUN.run_id, "r1", timeout=PATIENCE_S)
    # Then the second attempt's answer is the call's, under the same record and ids
    assert outcome.status is InvocationStatus.READY, outcome
    assert outcome.result == {"count": 1, "first": "attempt-2"}
    record = get_runtime().store.get(key)
    assert record is not None and record.attempt == 2
    assert '"attempt-2"' in (record.raw or "")
    # And the run's budget counted the call once, its progress indexed it once
    assert redis_client.hget(keys.budget_key(RUN.run_id), "calls") == "1"
    assert redis_client.hget(keys.budget_key(RUN.run_id), "tool:slow_first_time") == "1"
    assert len(redis_client.zrange(keys.progress_key(RUN.run_id), 0, -1)) == 1
    assert redis_client.hget(keys.record_key(key), "retries") == "1"


def test_a_hung_tool_holds_at_most_its_own_slots_and_never_starves_the_others(
    celery_boundary: ToolBoundary,
) -> None:
    celery_tools.HANG.clear()
    try:
        # Given a tool that hangs for ever, bounded to 2 runs at once per worker process
        for n in range(6):
            submit(celery_boundary, f"h{n}", "hang", {})
        hung = [celery_boundary.outcome(RUN.run_id, f"h{n}", timeout=PATIENCE_S) for n in range(6)]
        assert {o.error_code for o in hung} == {ErrorCode.TOOL_TIMEOUT}, hung
        # When healthy calls come to the same worker
        for n in range(8):
            submit(celery_boundary, f"ok{n}", "lookup", {"query": f"q{n}"})
        healthy = [
            celery_boundary.outcome(RUN.run_id, f"ok{n}", timeout=PATIENCE_S) for n in range(8)
        ]
        # Then they all answer: the hung tool holds at most its two threads
        assert {o.status for o in healthy} == {InvocationStatus.READY}, healthy
        assert tool_threads()._held.get("hang", 0) <= 2
    finally:
        celery_tools.HANG.set()


def test_a_tool_with_its_own_queue_is_sent_there_and_only_there(
    redis_client: redis.Redis, celery_session_app: Celery
) -> None:
    # Given a dispatcher on a broker DB no worker reads, and a tool declared queue="long"
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))
    broker = flush_db(SUBPROCESS_BROKER_DB)
    try:
        app = create_app(settings, name="tests_queues")
        boundary = get_runtime().boundary(CeleryDispatcher(app))
        # When a call to it and a call to a default tool are submitted
        submit(boundary, "q1", "long_lookup", {"query": "x"})
        submit(boundary, "q2", "lookup", {"query": "y"})
        # Then each execute message waits on its tool's queue
        assert broker.llen("long") == 1
        assert broker.llen("tools") == 1
        # (the headers' argsrepr names the ids; the body is encoded)
        assert "'q1'" in broker.lindex("long", 0) and "'q2'" in broker.lindex("tools", 0)
    finally:
        broker.flushdb()
