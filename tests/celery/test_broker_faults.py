"""A broker that misbehaves: one of the test's own redis-servers as the broker, paused with
SIGSTOP (it accepts connections, the kernel does, but answers nothing) or restarted."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import ErrorCode, InvocationStatus, Submission, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import celery_test_settings
from tests.support.servers import RedisServer, redis_server

#: The publish timeout of these tests, seconds.
PUBLISH_TIMEOUT_S = 2.0
#: A publish to a paused broker without a timeout never returns (the kernel accepts, Redis
#: never answers): only such a hang reaches this. How long DISPATCH_FAILED really takes
#: (about PUBLISH_TIMEOUT_S) is printed.
HANG_S = 60.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "broker") as server:
        yield server


@pytest.fixture
def broker_settings(
    broker: RedisServer, redis_client: redis.Redis, celery_session_app: Celery
) -> Settings:
    """Store and backend of the Celery tests (their runtime and tools), broker our own."""
    return celery_test_settings(broker_url=broker.url, publish_timeout_s=PUBLISH_TIMEOUT_S)


def _boundary(settings: Settings) -> ToolBoundary:
    return get_runtime().boundary(CeleryDispatcher(create_app(settings, name="tests_faults")))


async def _asubmit(boundary: ToolBoundary, envelope: ToolCallEnvelope) -> Submission:
    try:
        return await boundary.asubmit(envelope, RUN)
    finally:
        await boundary.aclose()


def _call(call_id: str) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name="lookup", arguments={"query": "x"}
    )


def test_a_paused_broker_fails_dispatch_within_the_publish_timeout(
    broker: RedisServer, broker_settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    boundary = _boundary(broker_settings)
    with celery_process(broker_settings, *worker_args("paused"), log=tmp_path / "w.log"):
        # Given a working broker (the first call connects and ends READY)
        assert boundary.invoke(_call("before"), RUN, timeout=30).status is InvocationStatus.READY
        # When the broker stops answering
        broker.pause()
        caplog.set_level(logging.WARNING, logger="boundary")
        try:
            took = []
            for n in range(3):
                started = time.monotonic()
                submission = boundary.submit(_call(f"paused-{n}"), RUN)
                took.append(time.monotonic() - started)
                # Then each call ends DISPATCH_FAILED, not hung (the publish timeout ended it)
                assert submission.outcome is not None
                assert submission.outcome.error_code is ErrorCode.DISPATCH_FAILED
                record = get_runtime().store.get(submission.key)
                assert record.status is InvocationStatus.ERROR
                assert record.error_code is ErrorCode.DISPATCH_FAILED
            assert max(took) < HANG_S, took
            # And the log says what failed under each dispatch (the error's type, which a
            # flaky broker and a bug tell apart), never the broker's address
            failed = [r.getMessage() for r in caplog.records if "sealing DISPATCH" in r.message]
            assert len(failed) == 3, failed
            assert all(re.search(r"failed \(DispatchError: \w+\)", line) for line in failed)
            assert str(broker.port) not in caplog.text
            # And an async call (published from the dispatcher's publishing thread) too:
            # its failed publish comes back to it, and the record is sealed DISPATCH_FAILED
            submission = asyncio.run(_asubmit(boundary, _call("paused-async")))
            assert submission.outcome is not None
            assert submission.outcome.error_code is ErrorCode.DISPATCH_FAILED
            record = get_runtime().store.get(submission.key)
            assert record.error_code is ErrorCode.DISPATCH_FAILED
        finally:
            broker.resume()
        # And once it answers again, calls go through and the worker serves them
        outcome = boundary.invoke(_call("after"), RUN, timeout=30)
        assert outcome.status is InvocationStatus.READY, outcome
    print(f"paused broker: DISPATCH_FAILED in {', '.join(f'{t:.2f}s' for t in took)}")
