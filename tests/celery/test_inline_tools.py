"""The threads pool runs each call's tool on the task's own thread, under the worker's
watchdog (``tasks.pool``): a hung tool is sealed TOOL_TIMEOUT at its limit while it still
runs, and the pool runs another thread in its place, so later calls keep the worker's full
concurrency (the consumer is handed a message for it, though the hung task never acks)."""

from __future__ import annotations

from pathlib import Path

import redis
from celery import Celery

from boundary import ErrorCode, InvocationStatus, ToolBoundary
from tasks.settings import Settings
from tests.celery.conftest import RUN
from tests.celery.test_worker_loss import isolated, submit
from tests.celery.workers import celery_process, worker_args
from tests.celery_tools import CROWD_SIZE

__all__ = ["isolated"]  # the fixture, used by name

HUNG = 2


def test_hung_tools_are_sealed_on_time_and_their_threads_replaced(
    isolated: tuple[Settings, Celery, ToolBoundary], redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings, _, boundary = isolated
    log = tmp_path / "w.log"
    with celery_process(
        settings, *worker_args("inline", pool="threads", concurrency=CROWD_SIZE), log=log
    ):
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
    text = log.read_text(errors="replace")
    assert f"{HUNG} thread(s) started in place of such runs" in text, text[-3000:]
