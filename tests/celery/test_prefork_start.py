"""A prefork worker one of whose pool processes is killed (SIGKILL) while the worker starts:
Celery's start check (``did_start_ok``) used to stop the whole worker ("Could not start worker
processes"; the chaos run: 3 exits in 90 minutes). Now the killed process is replaced and the
worker serves calls; a process that exits with a code still stops it, as Celery meant."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import InvocationStatus, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.start_killer import MARKER_ENV

pytestmark = pytest.mark.slow


def test_a_pool_process_killed_as_the_worker_starts_is_replaced_and_the_worker_serves(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), tools="tests.support.start_killer:registry"
    )
    flush_db(SUBPROCESS_BROKER_DB)
    marker = tmp_path / "killed"
    log = tmp_path / "w.log"
    # Given a prefork worker one of whose pool processes is killed as it starts (the worker's
    # readiness waits until that process is dead, so Celery's start check sees it)
    with celery_process(
        settings,
        *worker_args("killed-child", pool="prefork", concurrency=2),
        log=log,
        extra_env={MARKER_ENV: str(marker)},
    ) as worker:
        assert marker.exists()
        boundary = ToolBoundary(
            store=get_runtime().store,
            registry=get_runtime().registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="tests_killed_child")),
        )
        # When calls come
        outcomes = [
            boundary.invoke(
                ToolCallEnvelope(
                    run_id=RUN.run_id,
                    tool_call_id=f"killed-child-{n}",
                    tool_name="lookup",
                    arguments={"query": "x"},
                ),
                RUN,
                timeout=60,
            )
            for n in range(4)
        ]
        # Then the worker serves them and is still running
        assert [o.status for o in outcomes] == [InvocationStatus.READY] * 4
        text = log.read_text(errors="replace")
        assert worker.poll() is None, text[-3000:]
        assert "Could not start worker processes" not in text
        assert "killed by a signal while the worker started" in text
