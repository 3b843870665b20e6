"""Hung projectors: a projector runs under a time limit, so a few hung ones neither keep
later calls PROJECTING nor hold up the worker's warm shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import ErrorCode, InvocationStatus, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url

HUNG = 4
#: How long each hung projector hangs, seconds: far past any shutdown that does not wait.
HANG_S = 240
LATER = 20


@pytest.fixture
def isolated(
    redis_client: redis.Redis, celery_session_app: Celery
) -> Iterator[tuple[Settings, ToolBoundary]]:
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), projection_timeout_s=1
    )
    broker = flush_db(SUBPROCESS_BROKER_DB)
    boundary = get_runtime().boundary(CeleryDispatcher(create_app(settings, name="tests_hung")))
    yield settings, boundary
    broker.flushdb()


def test_hung_projectors_end_projection_failed_and_later_calls_settle(
    isolated: tuple[Settings, ToolBoundary], tmp_path: Path
) -> None:
    settings, boundary = isolated
    with celery_process(
        settings, *worker_args("hung", concurrency=HUNG), log=tmp_path / "w.log"
    ) as worker:
        # Given as many hung projectors as the worker has slots, then more calls behind them
        started = time.monotonic()
        ids = [f"hung-{n}" for n in range(HUNG)] + [f"later-{n}" for n in range(LATER)]
        for call_id in ids:
            tool, args = ("hung_projector", {"query": "x", "hang": HANG_S})
            if call_id.startswith("later"):
                tool, args = ("lookup", {"query": "x"})
            envelope = ToolCallEnvelope(
                run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=args
            )
            assert boundary.submit(envelope, RUN).accepted
        # When their outcomes are awaited
        outcomes = {call_id: boundary.outcome(RUN.run_id, call_id, timeout=60) for call_id in ids}
        settled = time.monotonic() - started
        # Then the hung ones end PROJECTION_FAILED and every later one READY
        for call_id, outcome in outcomes.items():
            if call_id.startswith("hung"):
                assert outcome.error_code is ErrorCode.PROJECTION_FAILED, outcome
            else:
                assert outcome.status is InvocationStatus.READY, outcome
        # And a warm shutdown does not wait for the hung projectors (they hang HANG_S: a
        # shutdown that waited for them would outlast this wait)
        stopping = time.monotonic()
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=HANG_S / 2)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the warm shutdown waits for the hung projectors ({HANG_S}s)")
        shutdown = time.monotonic() - stopping
    print(
        f"{HUNG} hung projectors + {LATER} calls settled in {settled:.2f}s; "
        f"warm shutdown {shutdown:.2f}s"
    )
