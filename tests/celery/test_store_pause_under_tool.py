"""A store that stops answering (SIGSTOP) just as a tool returns: keeping the raw response
times out, and the worker tries again. Only the store write is tried again: the tool ran
once. The execute task used to retry its whole step, tool included, so the tool ran again
for each retry (the chaos run found calls whose attempt ran two and three times)."""

from __future__ import annotations

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
from tests.support.celery_tools import runs_of
from tests.support.helpers import wait_until
from tests.support.servers import redis_server

#: How long the store (and the broker, on the same server) stays paused: past one socket
#: timeout (5 s), so the first write of the raw response times out, and well within the
#: worker's retries (about 23 s when paused).
PAUSE_S = 7.0


@pytest.mark.slow
def test_a_store_that_stops_answering_as_the_tool_returns_does_not_run_the_tool_again(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    with redis_server(tmp_path / "store", "--appendonly", "no") as store_server:
        # A broker of the test's own (on the same server): the session's in-process worker
        # consumes the shared one, with the session's store.
        settings = celery_test_settings(
            redis_url=store_server.url,
            result_backend=store_server.url.replace("/0", "/1"),
            broker_url=store_server.url.replace("/0", "/2"),
        )
        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
        boundary = ToolBoundary(
            store=store,
            registry=get_runtime().registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="tests_store_pause")),
        )
        log, release = tmp_path / "runs.log", tmp_path / "release"
        key = CanonicalKey(run_id=RUN.run_id, tool_call_id="pause-under-tool")
        with celery_process(settings, *worker_args("store-pause"), log=tmp_path / "w.log"):
            # Given a tool running a call, held until the test releases it
            envelope = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id=key.tool_call_id,
                tool_name="counted",
                arguments={"log": str(log), "until": str(release)},
            )
            assert boundary.submit(envelope, RUN).accepted
            wait_until(lambda: runs_of(str(log)) == 1, "the tool to run")
            # When the store stops answering and the tool returns
            store_server.pause()
            release.touch()
            time.sleep(PAUSE_S)
            store_server.resume()
            # Then the call ends READY and its tool ran once
            outcome = boundary.outcome(RUN.run_id, key.tool_call_id, timeout=60)
            assert outcome.status is InvocationStatus.READY
            assert runs_of(str(log)) == 1
