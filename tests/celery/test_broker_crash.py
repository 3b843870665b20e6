"""A broker Redis without persistence crashes (SIGKILL) under a busy worker, on each pool: its
queued and unacknowledged messages are gone. The worker stays up and reconnects; the reaper
(beat, in the worker) sends the lost calls again or ends them, so every accepted call ends
READY or with a stable code and none stays PROJECTING."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import ErrorCode, InvocationStatus, ToolBoundary, ToolCallEnvelope, ToolOutcome
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import celery_test_settings
from tests.support.helpers import wait_until
from tests.support.servers import redis_server

CALLS = 24
#: How long the broker stays down, seconds.
DOWN_S = 3.0
#: Bound of the wait for every call to end, seconds (reached only when the test fails).
GIVE_UP_S = 90.0
STABLE = {ErrorCode.WORKER_LOST, ErrorCode.STORE_UNAVAILABLE, ErrorCode.DISPATCH_FAILED}


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_worker_survives_a_broker_crash_that_loses_its_messages(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path, pool: str
) -> None:
    with redis_server(tmp_path / "broker") as broker:
        settings = celery_test_settings(
            broker_url=broker.url,
            result_backend=broker.url.replace("/0", "/1"),
            max_pending_s=6,
            reap_grace_s=1,
            reap_interval_s=1,
        )
        runtime = get_runtime()
        boundary = ToolBoundary(
            store=runtime.store,
            registry=runtime.registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="tests_crash")),
            max_pending_s=settings.max_pending_s,
            reap_grace_s=settings.reap_grace_s,
        )
        log = tmp_path / "w.log"
        args = (
            *worker_args(f"crash-{pool}", pool=pool, concurrency=4),
            "-B",
            "-s",
            str(tmp_path / "beat"),
        )
        with celery_process(settings, *args, log=log) as worker:
            pid = worker.pid
            # Given a worker busy with calls, more queued behind them
            ids = [f"crash-{pool}-{n}" for n in range(CALLS)]
            for call_id in ids:
                envelope = ToolCallEnvelope(
                    run_id=RUN.run_id,
                    tool_call_id=call_id,
                    tool_name="sleepy",
                    arguments={"seconds": 1.0},
                )
                assert boundary.submit(envelope, RUN).accepted
            time.sleep(0.5)
            # When the broker crashes, forgetting every message, and comes back empty
            broker.stop(signal.SIGKILL)
            time.sleep(DOWN_S)
            broker.start()

            # Then every call ends, READY or with a stable code, none PROJECTING
            def ended() -> list[ToolOutcome] | None:
                outcomes = [boundary.outcome(RUN.run_id, i, timeout=0.05) for i in ids]
                return None if any(o.pending for o in outcomes) else outcomes

            outcomes = wait_until(ended, f"every call to end (log: {log})", GIVE_UP_S, every=0.5)
            ends = Counter(o.error_code or o.status for o in outcomes)
            assert set(ends) <= {InvocationStatus.READY, *STABLE}, ends
            # And the same worker serves a new call
            after = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id=f"after-{pool}",
                tool_name="lookup",
                arguments={"query": "x"},
            )
            assert boundary.invoke(after, RUN, timeout=60).status is InvocationStatus.READY
            assert worker.poll() is None and worker.pid == pid, log.read_text()[-3000:]
    print(f"broker crash ({pool}): {dict(ends)}, worker restarts 0")
