"""A threads-pool worker whose Redis broker is full (``maxmemory``, noeviction) while it runs a
call: kombu's ack is refused ("OOM command not allowed", a reply error Celery does not treat
as a lost connection) and, without ``tasks.wiring.broker_transport``, the worker exits with
"Unrecoverable error". Here it keeps running, and the call ends READY once the broker has room.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import InvocationStatus, ToolBoundary, ToolCallEnvelope
from boundary.reaper import reap_once
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import PROJECT, PROJECTIONS_QUEUE, create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import celery_test_settings
from tests.support.helpers import wait_until
from tests.support.servers import redis_server

#: Bound of every wait of this test, seconds (reached only when it fails).
GIVE_UP_S = 60.0


@pytest.mark.slow
def test_a_threads_worker_survives_a_full_broker_under_a_running_call(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    with redis_server(tmp_path / "broker", "--maxmemory-policy", "noeviction") as broker:
        settings = celery_test_settings(broker_url=broker.url)
        app = create_app(settings, name="tests_broker_oom")
        runtime = get_runtime()
        boundary = ToolBoundary(
            store=runtime.store,
            registry=runtime.registry,
            dispatcher=CeleryDispatcher(app),
            max_pending_s=2,
            reap_grace_s=0,
        )
        log = tmp_path / "w.log"
        started = tmp_path / "started"
        with celery_process(settings, *worker_args("broker-oom"), log=log) as worker:
            # Given a threads worker running a call
            envelope = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="full-broker",
                tool_name="sleepy",
                arguments={"seconds": 1.0, "started": str(started)},
            )
            submission = boundary.submit(envelope, RUN)
            assert submission.accepted
            wait_until(started.exists, "the tool to start", GIVE_UP_S, every=0.1)
            # When its broker fills up (every write refused) before the call's ack
            admin = broker.client()
            admin.config_set("maxmemory", 1)
            try:
                # Then the ack goes through (kombu's unacked entry is removed) and the worker
                # is alive; today's kombu leaves the entry and the worker exits instead
                wait_until(
                    lambda: worker.poll() is not None or admin.hlen("unacked") == 0,
                    "an ack or an exit",
                    GIVE_UP_S,
                    every=0.1,
                )
                assert worker.poll() is None, log.read_text()[-3000:]
            finally:
                admin.config_set("maxmemory", 0)

            # And once the broker has room, the call's project step (its publish was refused)
            # is sent again by the reaper and the call ends READY: nothing stays PROJECTING
            def reproject(key: object) -> None:
                ids = [submission.key.run_id, submission.key.tool_call_id]
                app.send_task(
                    PROJECT,
                    args=ids,
                    task_id=submission.key.task_id("project"),
                    queue=PROJECTIONS_QUEUE,
                )

            def settled() -> bool:
                reap_once(runtime.store, reproject, retry_after_s=5, max_reprojections=2)
                record = runtime.store.get(submission.key)
                return record is not None and record.status is not InvocationStatus.PROJECTING

            wait_until(settled, "the call to end (not stay PROJECTING)", GIVE_UP_S, every=0.1)
            record = runtime.store.get(submission.key)
            assert record is not None and record.status is InvocationStatus.READY
            # And the same worker serves a new call
            after = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="after",
                tool_name="lookup",
                arguments={"query": "x"},
            )
            assert boundary.invoke(after, RUN, timeout=30).status is InvocationStatus.READY
            assert worker.poll() is None
