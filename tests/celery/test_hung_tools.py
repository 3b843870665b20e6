"""A worker whose tool threads are all held by hung tools stops taking work and exits for its
supervisor to restart it, saying so in one line; the call it could not start goes back to the
queue as a new attempt instead of failing."""

from __future__ import annotations

from pathlib import Path

import redis
from celery import Celery

from boundary import CanonicalKey, ErrorCode, InvocationStatus, ToolBoundary
from boundary.store import keys
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tests.celery.conftest import RUN
from tests.celery.test_worker_loss import isolated, submit
from tests.celery.workers import celery_process, worker_args
from tests.support.helpers import wait_until

__all__ = ["isolated"]  # the fixture, used by name

EXHAUSTED = "tool threads are held by hung tools; this process stops taking work"


def test_a_worker_whose_tool_threads_all_hang_exits_and_sends_its_call_back(
    isolated: tuple[Settings, Celery, ToolBoundary], redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings, _, boundary = isolated
    settings = settings.model_copy(update={"max_tool_threads": 2})
    log = tmp_path / "w.log"
    with celery_process(
        settings, *worker_args("hung", pool="threads", concurrency=1), log=log
    ) as worker:
        # Given two calls of a tool that hangs for ever: each holds a tool thread past its limit
        for n in range(2):
            submit(boundary, f"h{n}", "hang_unbounded", {})
            outcome = boundary.outcome(RUN.run_id, f"h{n}", timeout=60)
            assert outcome.error_code is ErrorCode.TOOL_TIMEOUT, outcome
        # When a third call comes and finds every thread held by a hung run
        submit(boundary, "h2", "hang_unbounded", {})
        # Then the worker says so in one line and exits by itself (its supervisor restarts it)
        wait_until(
            lambda: worker.poll() is not None, f"the worker to exit (log: {log})", 60, every=0.2
        )
    text = log.read_text(errors="replace")
    assert text.count(EXHAUSTED) == 1, text[-3000:]
    # And the call it could not start is not failed: it waits for a worker as attempt 2
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="h2")
    record = get_runtime().store.get(key)
    assert record is not None and record.status is InvocationStatus.PROJECTING
    assert record.attempt == 2 and record.started_at is None
    assert redis_client.hget(keys.record_key(key), "redispatches") == "1"
