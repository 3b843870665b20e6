"""Loss found in seconds: SIGKILL a real worker while a heartbeating tool runs. The reaper
finds the silent call once its heartbeat timeout passes and retries it on the same record
(READY on attempt 2, one raw response, budgets counted once), or seals it WORKER_LOST when
its policy does not retry; a call whose message never reached a tool is sent again."""

from __future__ import annotations

import os
import signal
import time
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
from boundary.reaper import Retries, reap_once
from boundary.store import keys
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tests.celery.conftest import RUN
from tests.celery.test_worker_loss import assert_ended_once, isolated, submit
from tests.celery.workers import celery_process, worker_args
from tests.support.helpers import wait_until

__all__ = ["isolated"]  # the fixture, used by name

#: The test tools' heartbeat timeout (``beating``), seconds.
HEARTBEAT_TIMEOUT_S = 2.0
#: The issue's bound: found within the heartbeat timeout plus this, after the last sign of life.
BOUND_S = HEARTBEAT_TIMEOUT_S + 10.0


def kill_while_beating(
    settings: Settings, boundary: ToolBoundary, tmp_path: Path, tool: str, pool: str
) -> tuple[CanonicalKey, float]:
    """Starts ``tool`` in a ``pool`` worker, SIGKILLs the whole worker (its pool processes
    too) after the tool's first steps; returns the key and the monotonic time of the kill."""
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="hb1")
    folder = tmp_path / "steps"
    folder.mkdir()
    with celery_process(
        settings, *worker_args("doomed", pool=pool, concurrency=2), log=tmp_path / "a.log"
    ) as worker:
        arguments = {"steps": 100, "retry_steps": 5, "step_s": 0.05, "dir": str(folder)}
        submit(boundary, "hb1", tool, arguments)
        wait_until(
            lambda: len(list(folder.glob("hb1-1-*"))) >= 3,
            f"the tool's first 3 steps (worker log: {tmp_path / 'a.log'})",
            60,
            every=0.05,
        )
        os.killpg(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        worker.wait()
    record = get_runtime().store.get(key)
    assert record is not None and record.status is InvocationStatus.PROJECTING
    assert record.started_at is not None and record.attempt == 1
    return key, killed


def reap_until(app: Celery, what: str, killed: float) -> tuple[dict[str, int], float]:
    """Runs reaper passes (as beat would, every half second) until one does ``what``; the
    retries go to ``app``'s broker (the subprocess workers' own)."""
    runtime = get_runtime()
    settings = runtime.settings
    retries = Retries(
        registry=runtime.registry,
        sender=CeleryDispatcher(app),
        max_redispatches=settings.max_redispatches,
        max_pending_s=settings.max_pending_s,
        reap_grace_s=settings.reap_grace_s,
    )

    def reaper_pass() -> dict[str, int] | None:
        reaped = reap_once(
            runtime.store,
            lambda key: None,
            retry_after_s=settings.projection_timeout_s,
            max_reprojections=settings.max_reprojections,
            retries=retries,
        ).as_dict()
        return reaped if reaped[what] else None

    patience = 60 - (time.monotonic() - killed)
    reaped = wait_until(reaper_pass, f"a reaper pass that {what} the call", patience, every=0.5)
    return reaped, time.monotonic() - killed


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_killed_worker_s_heartbeating_call_is_retried_and_ends_ready_on_attempt_2(
    isolated: tuple[Settings, Celery, ToolBoundary],
    redis_client: redis.Redis,
    tmp_path: Path,
    pool: str,
) -> None:
    settings, app, boundary = isolated
    key, killed = kill_while_beating(settings, boundary, tmp_path, "beating", pool)
    # When the reaper runs: the call is silent past its heartbeat timeout
    _, found_after = reap_until(app, "retried", killed)
    # Then it was found within the bound, and handed to attempt 2 on the same record
    assert found_after <= BOUND_S, found_after
    record = get_runtime().store.get(key)
    assert record is not None and record.attempt == 2 and record.started_at is None
    # And a new worker runs attempt 2 to READY
    with celery_process(
        settings, *worker_args("heir", pool="threads", concurrency=2), log=tmp_path / "b.log"
    ):
        outcome = boundary.outcome(RUN.run_id, "hb1", timeout=60)
    assert outcome.status is InvocationStatus.READY, outcome
    assert outcome.result == {"count": 1, "first": "beat-2"}
    record = get_runtime().store.get(key)
    assert record is not None and record.attempt == 2 and '"attempt":2' in (record.raw or "")
    # And the call ended once, counted once by the run's budget
    assert_ended_once(redis_client, key)
    assert redis_client.hget(keys.budget_key(RUN.run_id), "calls") == "1"
    print(f"heartbeat loss ({pool}): retried {found_after:.2f}s after the kill")


def test_a_killed_worker_s_call_without_retries_is_sealed_worker_lost_within_the_bound(
    isolated: tuple[Settings, Celery, ToolBoundary], redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings, app, boundary = isolated
    key, killed = kill_while_beating(settings, boundary, tmp_path, "beating_once", "solo")
    _, sealed_after = reap_until(app, "sealed", killed)
    record = get_runtime().store.get(key)
    assert record is not None and record.error_code is ErrorCode.WORKER_LOST
    assert sealed_after <= BOUND_S, sealed_after
    assert_ended_once(redis_client, key)
    print(f"heartbeat loss (solo): sealed {sealed_after:.2f}s after the kill")


def test_a_call_whose_message_never_reached_a_tool_is_sent_again_by_the_reaper(
    isolated: tuple[Settings, Celery, ToolBoundary], redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings, app, _ = isolated
    # Given a call accepted by a boundary whose message was lost on the way (a short
    # max pending time stands for "long past any queue wait")
    runtime = get_runtime()
    lost = runtime.boundary(_Blackhole())
    lost.max_pending_s = 0.5
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id="lost1", tool_name="lookup", arguments={"query": "q"}
    )
    assert lost.submit(envelope, RUN).accepted
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="lost1")
    with celery_process(
        settings, *worker_args("heir", pool="threads", concurrency=2), log=tmp_path / "b.log"
    ):
        # When the reaper finds it due (reap grace 1 s in these settings)
        reap_until(app, "retried", time.monotonic())
        # Then it is sent again (whatever its retry policy: nothing ran) and ends READY
        outcome = lost.outcome(RUN.run_id, "lost1", timeout=60)
    assert outcome.status is InvocationStatus.READY, outcome
    record = runtime.store.get(key)
    assert record is not None and record.attempt == 2
    assert redis_client.hget(keys.record_key(key), "redispatches") == "1"
    assert_ended_once(redis_client, key)


class _Blackhole:
    """A dispatcher whose messages vanish: the call is accepted and never reaches a worker."""

    def dispatch(self, key: CanonicalKey) -> None:
        return None

    def wait(self, key: CanonicalKey, timeout: float | None) -> None:
        return None
