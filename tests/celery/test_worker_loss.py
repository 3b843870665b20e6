"""Worker loss: SIGKILL real worker processes while a tool runs. Every call still ends exactly
once (READY or ERROR/WORKER_LOST) and no record stays PROJECTING."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import (
    CanonicalKey,
    ErrorCode,
    InvocationStatus,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.store import keys
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import create_app
from tasks.worker.calls import reap_stuck_calls
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.helpers import wait_until


@pytest.fixture
def isolated(
    redis_client: redis.Redis, celery_session_app: Celery
) -> Iterator[tuple[Settings, Celery, ToolBoundary]]:
    """Settings, client app and boundary on a broker DB of their own (the in-process worker
    never sees these messages)."""
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB),
        # Redelivery of an unacknowledged message after a whole-worker crash; above every
        # test tool's timeout (8 s at most), as the worker checks at start.
        visibility_timeout_s=10,
        restore_sweep_s=1,
    )
    broker = flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_isolated")
    boundary = get_runtime().boundary(CeleryDispatcher(app))
    yield settings, app, boundary
    broker.flushdb()


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(line) for line in out.stdout.split()]


def submit(boundary: ToolBoundary, call_id: str, tool: str, arguments: dict, run=RUN) -> None:
    envelope = ToolCallEnvelope(
        run_id=run.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )
    assert boundary.submit(envelope, run).accepted


def assert_ended_once(redis_client: redis.Redis, key: CanonicalKey) -> None:
    """Sealed, indexed exactly once in the run's progress, nothing left pending."""
    record = get_runtime().store.get(key)
    assert record is not None and record.status is not InvocationStatus.PROJECTING
    members = redis_client.zrange(keys.progress_key(key.run_id), 0, -1)
    assert [m.rsplit(":", 1)[0] for m in members] == [key.identity]
    assert redis_client.exists(keys.pending_key(key.run_id)) == 0


def test_killed_pool_process_is_retried_and_ends_ready(
    isolated: tuple[Settings, Celery, ToolBoundary], redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings, _, boundary = isolated
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="c1")
    with celery_process(
        settings, *worker_args("prefork", pool="prefork", concurrency=1), log=tmp_path / "w.log"
    ) as worker:
        # Given a tool running in the worker's only pool process (it says so: a file)
        started_file = tmp_path / "started"
        submit(boundary, "c1", "sleepy", {"seconds": 3, "started": str(started_file)})
        wait_until(
            started_file.exists,
            f"the tool to start (worker log: {tmp_path / 'w.log'})",
            60,
            every=0.05,
        )
        (child,) = children(worker.pid)
        # When that process is killed
        started = time.monotonic()
        os.kill(child, signal.SIGKILL)
        outcome = boundary.outcome(RUN.run_id, "c1", timeout=30)
        settled = time.monotonic() - started
    # Then the call was run again in a new process and ended READY, once
    assert outcome.status is InvocationStatus.READY, outcome
    raw_pid = get_runtime().store.get(key).raw
    assert str(child) not in raw_pid
    assert_ended_once(redis_client, key)
    print(f"pool-process kill settled in {settled:.2f}s")


def test_tool_that_always_kills_its_worker_ends_worker_lost(
    isolated: tuple[Settings, Celery, ToolBoundary], redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings, _, boundary = isolated
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="c1")
    with celery_process(
        settings, *worker_args("prefork", pool="prefork", concurrency=1), log=tmp_path / "w.log"
    ):
        started = time.monotonic()
        submit(boundary, "c1", "suicide", {})
        outcome = boundary.outcome(RUN.run_id, "c1", timeout=60)
        settled = time.monotonic() - started
    # Then after its bounded retries the call is sealed WORKER_LOST, not requeued for ever
    assert outcome.status is InvocationStatus.ERROR
    assert outcome.error_code is ErrorCode.WORKER_LOST
    assert_ended_once(redis_client, key)
    log = (tmp_path / "w.log").read_text()
    assert log.count("Task tool_boundary.execute[run-e2e:c1:execute] received") == 1 + (
        settings.worker_lost_max_retries
    )
    print(f"always-killed call settled in {settled:.2f}s")


def test_whole_worker_killed_call_is_reaped_and_redelivery_does_not_run_it_again(
    isolated: tuple[Settings, Celery, ToolBoundary], redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings, _, boundary = isolated
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="c1")
    # (a deadline far enough that a loaded machine's slow worker start cannot pass it first)
    run = RUN.model_copy(update={"deadline": datetime.now(UTC) + timedelta(seconds=10)})
    # Given a tool running when its whole worker (main process and pool) is SIGKILLed
    with celery_process(
        settings, *worker_args("doomed", pool="prefork", concurrency=1), log=tmp_path / "a.log"
    ) as worker:
        submit(boundary, "c1", "sleepy", {"seconds": 8}, run=run)
        received = "Task tool_boundary.execute[run-e2e:c1:execute] received"
        wait_until(
            lambda: received in (tmp_path / "a.log").read_text(errors="replace"),
            f"the worker to receive the call (its log: {tmp_path / 'a.log'})",
            30,
            every=0.1,
        )
        time.sleep(0.5)
        started = time.monotonic()
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    assert get_runtime().store.get(key).status is InvocationStatus.PROJECTING
    # When the reaper runs after the deadline plus grace
    wait_until(
        lambda: reap_stuck_calls()["sealed"],
        "a reaper pass that seals the call",
        60 - (time.monotonic() - started),
        every=0.5,
    )
    settled = time.monotonic() - started
    # Then the call is sealed WORKER_LOST
    sealed = get_runtime().store.get(key)
    assert sealed.status is InvocationStatus.ERROR
    assert sealed.error_code is ErrorCode.WORKER_LOST
    assert_ended_once(redis_client, key)
    # And when a new worker gets the unacknowledged message back, it does not run it again
    with celery_process(
        settings, *worker_args("heir", pool="prefork", concurrency=1), log=tmp_path / "b.log"
    ):
        log = tmp_path / "b.log"
        # (a sealed ERROR record: the project task fails with the code only)
        wait_until(
            lambda: "run-e2e:c1:project] raised expected: ToolCallFailed" in log.read_text(),
            f"the project task to fail with the code (worker log: {log})",
            30,
            every=0.2,
        )
    assert "'SEALED'" in log.read_text()
    assert get_runtime().store.get(key) == sealed
    assert_ended_once(redis_client, key)
    print(f"whole-worker kill reaped in {settled:.2f}s")


def test_worker_refuses_to_start_when_visibility_timeout_is_below_a_tool_timeout(
    isolated: tuple[Settings, Celery, ToolBoundary], tmp_path: Path
) -> None:
    settings = isolated[0].model_copy(update={"visibility_timeout_s": 5})  # sleepy: 8 s
    with (
        pytest.raises(RuntimeError, match="did not start") as failed,
        celery_process(settings, *worker_args("short-vt"), log=tmp_path / "w.log", timeout_s=20),
    ):
        pass
    assert "must exceed the longest tool timeout" in str(failed.value)
