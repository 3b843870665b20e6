"""A worker that starts (or is restarted) while its broker is full (``maxmemory``,
noeviction), started as the Procfile starts one (mingle and gossip on): its start-up talks to
the broker (mingle's hello, the reply queue's declaration, the unacked sweep's lock) and Redis
refuses those commands. Celery counted the refusal as a channel error and the worker exited
with "Unrecoverable error: OutOfMemoryError" (the chaos run: 24 exits in 30 minutes, a crash
loop for as long as the broker stayed full). Now it is retried like a lost connection: the
worker stays up and serves calls once the broker has room."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from celery import Celery

from bench.rig.workers import celery_command, start_process, stop_group, worker_args
from boundary import InvocationStatus, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import settings_env
from tests.conftest import celery_test_settings
from tests.support.helpers import wait_until
from tests.support.servers import redis_server

#: Bound of each wait of the test (reached only when it fails).
GIVE_UP_S = 60.0


@pytest.mark.slow
def test_a_worker_started_while_its_broker_is_full_waits_for_room_instead_of_exiting(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    with redis_server(tmp_path / "broker", "--maxmemory-policy", "noeviction") as broker:
        settings = celery_test_settings(broker_url=broker.url)
        admin = broker.client()
        # Given a full broker
        admin.config_set("maxmemory", 1)
        log = tmp_path / "w.log"
        queues = ("tools", "projections")
        args = worker_args("threads", 4, queues, node="full-start@%h", alone=False)
        worker = start_process(celery_command("tasks", *args), settings_env(settings), log)
        try:
            # When a worker starts on it: its start-up meets the refusal
            def met_or_exited() -> bool:
                text = log.read_text(errors="replace")
                return worker.poll() is not None or "Trying to re" in text

            wait_until(met_or_exited, "the worker to meet the full broker", GIVE_UP_S)
            # Then it is still running, and once the broker has room it starts and serves
            assert worker.poll() is None, log.read_text(errors="replace")[-3000:]
            admin.config_set("maxmemory", 0)
            wait_until(
                lambda: " ready." in log.read_text(errors="replace"), "the worker", GIVE_UP_S
            )
            boundary = ToolBoundary(
                store=get_runtime().store,
                registry=get_runtime().registry,
                dispatcher=CeleryDispatcher(create_app(settings, name="tests_full_start")),
            )
            call = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="full-start",
                tool_name="lookup",
                arguments={"query": "x"},
            )
            assert boundary.invoke(call, RUN, timeout=GIVE_UP_S).status is InvocationStatus.READY
            assert worker.poll() is None
            assert "Unrecoverable error" not in log.read_text(errors="replace")
        finally:
            stop_group(worker, timeout_s=20)
