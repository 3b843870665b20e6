"""A threads-pool worker busy with calls when its broker restarts: every call settles and the
worker keeps serving."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import InvocationStatus, RedisCanonicalStore, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import celery_test_settings
from tests.support.servers import redis_server

CALLS = 40
#: How long the broker stays down, seconds.
DOWN_S = 3.0


@pytest.mark.slow
def test_a_busy_threads_worker_survives_a_broker_restart(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    with redis_server(tmp_path / "broker", "--appendonly", "yes") as broker:
        # One Redis for store, broker and results, as the defaults have it
        settings = celery_test_settings(
            redis_url=broker.url.replace("/0", "/2"),
            broker_url=broker.url,
            result_backend=broker.url.replace("/0", "/1"),
        )
        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
        boundary = ToolBoundary(
            store=store,
            registry=get_runtime().registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="tests_restart")),
        )
        log = tmp_path / "w.log"
        with celery_process(settings, *worker_args("restart", concurrency=8), log=log) as worker:
            # Given a threads worker busy with calls
            for n in range(CALLS):
                envelope = ToolCallEnvelope(
                    run_id=RUN.run_id,
                    tool_call_id=f"c{n}",
                    tool_name="sleepy",
                    arguments={"seconds": 1.5, "n": n},
                )
                assert boundary.submit(envelope, RUN).accepted
            time.sleep(1.0)
            # When its broker restarts under it
            broker.stop()
            time.sleep(DOWN_S)
            broker.start()
            restarted = time.monotonic()
            # Then every call settles (none left PROJECTING) and the worker is alive
            outcomes = [boundary.outcome(RUN.run_id, f"c{n}", timeout=90) for n in range(CALLS)]
            settled = time.monotonic() - restarted
            pending = [o for o in outcomes if o.status is InvocationStatus.PROJECTING]
            assert not pending, (len(pending), log.read_text()[-3000:])
            assert worker.poll() is None, log.read_text()[-3000:]
            # And it serves a call sent after the restart
            after = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="after",
                tool_name="lookup",
                arguments={"query": "x"},
            )
            assert boundary.invoke(after, RUN, timeout=60).status is InvocationStatus.READY
    ends = Counter(o.error_code or o.status for o in outcomes)
    print(f"broker restart under load: {dict(ends)}, all settled {settled:.2f}s after")
