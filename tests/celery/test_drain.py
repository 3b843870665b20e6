"""Workers that drain (``tasks.worker.drain``): on SIGTERM a worker takes no new message,
lets its running calls finish for ``TOOL_BOUNDARY_WORKER_DRAIN_S``, then hands each
unfinished one back (attempt given up, counted, sent again at once) and exits; another
worker runs the call as its next attempt. Threads and prefork pools."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import CanonicalKey, InvocationStatus, ToolBoundary
from boundary.store import keys
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tests.celery.conftest import RUN
from tests.celery.test_worker_loss import isolated, submit
from tests.celery.workers import celery_process, worker_args
from tests.support.helpers import wait_until

__all__ = ["isolated"]  # the fixture, used by name

#: Longest a draining worker may take to exit here (only a hung one reaches it), seconds.
EXIT_PATIENCE_S = 60


def _key(call_id: str) -> CanonicalKey:
    return CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)


def _started(call_id: str) -> bool:
    record = get_runtime().store.get(_key(call_id), with_raw=False)
    return record is not None and record.started_at is not None


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_draining_worker_hands_its_long_calls_back_and_another_runs_them(
    pool: str,
    isolated: tuple[Settings, Celery, ToolBoundary],
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    settings, _, boundary = isolated
    drain = {"TOOL_BOUNDARY_WORKER_DRAIN_S": "1"}
    old_log, new_log = tmp_path / "old.log", tmp_path / "new.log"
    calls = [f"long-{pool}-{i}" for i in range(2)]
    with celery_process(
        settings,
        *worker_args(f"old-{pool}", pool=pool, concurrency=2),
        log=old_log,
        extra_env=drain,
    ) as old:
        # Given a worker running two long heartbeating calls (8 s each; 1 step on a retry)
        for call in calls:
            arguments = {"steps": 80, "step_s": 0.1, "retry_steps": 1, "dir": str(tmp_path)}
            submit(boundary, call, "beating_long", arguments)
        for call in calls:
            wait_until(lambda call=call: _started(call), f"{call} started")
        with celery_process(
            settings, *worker_args(f"new-{pool}", pool=pool, concurrency=2), log=new_log
        ):
            # When the old worker is told to stop (a rolling deploy's SIGTERM)
            os.kill(old.pid, signal.SIGTERM)
            try:
                code = old.wait(timeout=EXIT_PATIENCE_S)
            except subprocess.TimeoutExpired:
                pytest.fail("the draining worker did not exit: " + old_log.read_text()[-3000:])

            # Then it exited cleanly after handing both calls back, and each call ran again
            # as its next attempt on the new worker, sealed once
            assert code == 0, old_log.read_text()[-3000:]
            for call in calls:
                outcome = boundary.outcome(RUN.run_id, call, timeout=60)
                assert outcome.status is InvocationStatus.READY, outcome
                assert outcome.result == {"count": 1, "first": "beat-2"}, outcome
                record = get_runtime().store.get(_key(call), with_raw=False)
                assert record is not None and (record.attempt, record.handbacks) == (2, 1)
                # The old attempt's tool was cancelled through its heartbeat
                assert (tmp_path / f"{call}-1-exit").read_text() == "cancelled"
                assert redis_client.hget(keys.record_key(_key(call)), "handbacks") == "1"
            # Each sealed once: in the run's progress once, nothing left pending
            members = redis_client.zrange(keys.progress_key(RUN.run_id), 0, -1)
            assert sorted(m.rsplit(":", 1)[0] for m in members) == [_key(c).identity for c in calls]
            assert redis_client.zcard(keys.pending_key(RUN.run_id)) == 0
    text = old_log.read_text(errors="replace")
    assert "handed back by a draining worker" in text, text[-3000:]
    # Each old attempt's task failed with the code only (Flower lists it "Failed": HANDED_BACK)
    assert text.count("ToolCallFailed('HANDED_BACK')") == len(calls), text[-3000:]
    assert "Traceback" not in text


def test_a_call_that_finishes_within_the_drain_time_is_not_handed_back(
    isolated: tuple[Settings, Celery, ToolBoundary], tmp_path: Path
) -> None:
    settings, _, boundary = isolated
    log = tmp_path / "w.log"
    with celery_process(
        settings,
        *worker_args("drain-ok"),
        log=log,
        extra_env={"TOOL_BOUNDARY_WORKER_DRAIN_S": "30"},
    ) as worker:
        # Given a call of one second running
        arguments = {"steps": 10, "step_s": 0.1, "dir": str(tmp_path)}
        submit(boundary, "short", "beating_long", arguments)
        wait_until(lambda: _started("short"), "the call started")

        # When the worker is told to stop
        os.kill(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=EXIT_PATIENCE_S) == 0

    # Then the call's tool finished on it, in its first attempt, its raw response kept (its
    # project step waits for the next worker), and nothing was handed back
    assert (tmp_path / "short-1-exit").read_text() == "done"
    record = get_runtime().store.get(_key("short"))
    assert record is not None and record.raw is not None
    assert (record.attempt, record.handbacks) == (1, 0)
    assert "handed back by a draining worker" not in log.read_text(errors="replace")
