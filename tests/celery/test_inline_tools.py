"""The threads pool runs each call's tool on the task's own thread, under the worker's
watchdog (``tasks.worker.pool``): a hung tool is sealed TOOL_TIMEOUT at its limit while it still
runs, and the pool runs another thread in its place, so later calls keep the worker's full
concurrency (the consumer is handed a message for it, though the hung task never acks)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import CanonicalKey, ErrorCode, InvocationStatus, ToolBoundary
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import create_app
from tasks.wiring.failures import ToolCallFailed
from tasks.worker.calls import project_result
from tests.celery.conftest import RUN
from tests.celery.test_worker_loss import isolated, submit
from tests.celery.workers import celery_process, worker_args
from tests.conftest import AMQP_GROUP, AMQP_URL, require_service
from tests.support.celery_tools import CROWD_SIZE
from tests.support.helpers import create_terms

__all__ = ["isolated"]  # the fixture, used by name

HUNG = 2


@pytest.mark.parametrize("broker", ["redis", pytest.param("rabbitmq", marks=AMQP_GROUP)])
def test_hung_tools_are_sealed_on_time_and_their_threads_replaced(
    isolated: tuple[Settings, Celery, ToolBoundary],
    redis_client: redis.Redis,
    tmp_path: Path,
    broker: str,
) -> None:
    settings, _, boundary = isolated
    if broker == "rabbitmq":
        # The broker enforces the prefetch count itself (basic.qos), not kombu.
        require_service("RabbitMQ", "127.0.0.1", 5672)
        settings = settings.model_copy(update={"broker_url": AMQP_URL})
        app = create_app(settings, name="tests_inline_amqp")
        app.control.purge()
        boundary = get_runtime().boundary(CeleryDispatcher(app))
    log = tmp_path / "w.log"
    with celery_process(
        settings, *worker_args("inline", pool="threads", concurrency=CROWD_SIZE), log=log
    ) as worker:
        # Given tools that hang for ten minutes on the worker's own pool threads
        for n in range(HUNG):
            submit(boundary, f"h{n}", "hang_unbounded", {})
        # When their outcomes are awaited
        hung = [boundary.outcome(RUN.run_id, f"h{n}", timeout=60) for n in range(HUNG)]
        # Then each ends TOOL_TIMEOUT while its tool still runs (sealed by the watchdog)
        assert {o.error_code for o in hung} == {ErrorCode.TOOL_TIMEOUT}, hung
        # And then as many calls as the worker's concurrency, each of which returns "crowd"
        # only if all of them run side by side, are all served at once
        for n in range(CROWD_SIZE):
            submit(boundary, f"c{n}", "crowd", {"n": n})
        crowd = [boundary.outcome(RUN.run_id, f"c{n}", timeout=60) for n in range(CROWD_SIZE)]
        assert {o.status for o in crowd} == {InvocationStatus.READY}, crowd
        assert sorted(o.result["first"] for o in crowd if o.result) == [
            f"crowd-{n}" for n in range(CROWD_SIZE)
        ], crowd
        # And a warm shutdown does not wait for the hung tools (they hang ten minutes)
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("the warm shutdown waits for the hung tools")
    text = log.read_text(errors="replace")
    assert f"{HUNG} thread(s) started in place of such runs" in text, text[-3000:]


def test_the_project_step_the_watchdog_sends_only_reports_and_never_seals(
    redis_client: redis.Redis,
) -> None:
    # Given a PROJECTING record with no raw response (another call under the ids of one the
    # watchdog sealed, after the store forgot that one; or the call's next attempt)
    store = get_runtime().store
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="reported")
    store.create(key, **create_terms(tool_name="lookup"))
    # When the report-only project step runs for those ids
    assert project_result(key.run_id, key.tool_call_id, report=True) == {}
    # Then it left the record alone (an ordinary project step would seal it ERROR)
    record = store.get(key)
    assert record is not None and record.status is InvocationStatus.PROJECTING
    with pytest.raises(ToolCallFailed):
        project_result(key.run_id, key.tool_call_id)
    record = store.get(key)
    assert record is not None and record.status is InvocationStatus.ERROR
