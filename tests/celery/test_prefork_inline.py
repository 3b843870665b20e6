"""A prefork child runs each call's tool in line on its main thread, under the watchdog
(``tasks.worker.pool.ChildHost``): an overdue tool is sealed TOOL_TIMEOUT at its limit, then
interrupted, and the same child serves the next call; a tool no interruption stops ends its
child, and a fresh child serves the next call."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from celery import Celery

from boundary import CanonicalKey, ErrorCode, InvocationStatus, ToolBoundary
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tests.celery.conftest import RUN
from tests.celery.test_worker_loss import children, isolated, submit
from tests.celery.workers import celery_process, worker_args

__all__ = ["isolated"]  # the fixture, used by name


def _pid_of(call_id: str) -> int:
    record = get_runtime().store.get(CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id))
    assert record is not None and record.status is InvocationStatus.READY, record
    return int(json.loads(record.raw)["hits"][0]["pid"])


def test_an_overdue_tool_in_a_prefork_child_is_sealed_then_interrupted_or_its_child_replaced(
    isolated: tuple[Settings, Celery, ToolBoundary], redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings, _, boundary = isolated
    log = tmp_path / "w.log"
    with celery_process(
        settings, *worker_args("prefork-inline", pool="prefork", concurrency=1), log=log
    ) as worker:
        # Given a worker with one pool process, serving a call
        submit(boundary, "first", "hang_unbounded", {"seconds": 0})
        assert boundary.outcome(RUN.run_id, "first", timeout=60).status is InvocationStatus.READY
        (child,) = children(worker.pid)
        assert _pid_of("first") == child

        # When a tool hangs ten minutes in that process
        submit(boundary, "hung", "hang_unbounded", {})
        hung = boundary.outcome(RUN.run_id, "hung", timeout=60)
        # Then it ends TOOL_TIMEOUT (the watchdog sealed it at its limit), and the same
        # process, its tool interrupted, serves the next call
        assert hung.error_code is ErrorCode.TOOL_TIMEOUT, hung
        submit(boundary, "after-hung", "hang_unbounded", {"seconds": 0})
        after = boundary.outcome(RUN.run_id, "after-hung", timeout=60)
        assert after.status is InvocationStatus.READY, after
        assert _pid_of("after-hung") == child

        # When a tool that swallows its interruption hangs there
        submit(boundary, "stubborn", "hang_unbounded", {"stubborn": True})
        stubborn = boundary.outcome(RUN.run_id, "stubborn", timeout=60)
        # Then it ends TOOL_TIMEOUT too, its process exits, and a fresh one serves the next call
        assert stubborn.error_code is ErrorCode.TOOL_TIMEOUT, stubborn
        submit(boundary, "after-stubborn", "hang_unbounded", {"seconds": 0})
        later = boundary.outcome(RUN.run_id, "after-stubborn", timeout=60)
        assert later.status is InvocationStatus.READY, later
        assert _pid_of("after-stubborn") not in (child, worker.pid)
    text = log.read_text(errors="replace")
    assert "did not stop within" in text, text[-3000:]
