"""The issue-32 recipe: a worker running calls when its broker's redis-server (no persistence)
is SIGKILLed and started again on the same port 5 s later. On kombu's own transport a threads
worker logged "Restoring 6 unacknowledged message(s)", then "Unrecoverable error:
AttributeError('NoneType' object has no attribute 'hostname')" and exited. Here it keeps
running, its calls end READY and it serves a call sent afterwards
(``bench.studies.chaos.broker_kill`` is the same recipe as a script)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import (
    CanonicalKey,
    InvocationStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import celery_test_settings
from tests.support.helpers import wait_until
from tests.support.servers import redis_server

CALLS = 6
#: How long the broker stays dead, seconds (the recipe's).
DOWN_S = 5.0
#: The worker is watched this long after the broker is back: the exit came within a second.
WATCH_S = 5.0


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_worker_keeps_running_when_its_broker_is_killed_under_running_calls(
    pool: str, redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    with (
        redis_server(tmp_path / "broker", "--appendonly", "no") as broker,
        redis_server(tmp_path / "store", "--appendonly", "no") as store_server,
    ):
        settings = celery_test_settings(
            redis_url=store_server.url,
            broker_url=broker.url,
            result_backend=store_server.url.replace("/0", "/1"),
        )
        runtime = get_runtime()
        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
        boundary = ToolBoundary(
            store=store,
            registry=runtime.registry,
            dispatcher=CeleryDispatcher(create_app(settings, name=f"tests_kill_{pool}")),
        )
        log = tmp_path / "w.log"
        args = worker_args(f"kill-{pool}", pool=pool, concurrency=8)
        with celery_process(settings, *args, log=log) as worker:
            # Given a worker running 6 calls of 1.5 s
            keys = [CanonicalKey(run_id=RUN.run_id, tool_call_id=f"k{n}") for n in range(CALLS)]
            for key in keys:
                envelope = ToolCallEnvelope(
                    run_id=RUN.run_id,
                    tool_call_id=key.tool_call_id,
                    tool_name="sleepy",
                    arguments={"seconds": 1.5},
                )
                assert boundary.submit(envelope, RUN).accepted
            wait_until(
                lambda: all((r := store.get(k)) is not None and r.started_at for k in keys),
                "the calls run",
            )
            # When its broker is killed and comes back empty on the same port 5 s later
            broker.stop(signal.SIGKILL)
            time.sleep(DOWN_S)
            broker.start()
            time.sleep(WATCH_S)
            # Then the worker is alive, its calls end READY, and it runs a call sent now
            text = log.read_text(errors="replace")
            assert worker.poll() is None, text[-3000:]
            assert "Unrecoverable error" not in text, text[-3000:]
            outcomes = [boundary.outcome(RUN.run_id, k.tool_call_id, timeout=60) for k in keys]
            assert [o.status for o in outcomes] == [InvocationStatus.READY] * CALLS, text[-3000:]
            after = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id=f"after-{pool}",
                tool_name="lookup",
                arguments={"query": "x"},
            )
            assert boundary.invoke(after, RUN, timeout=60).status is InvocationStatus.READY
