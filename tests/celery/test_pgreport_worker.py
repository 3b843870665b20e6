"""The PostgreSQL report tool in a real ``celery worker`` process on the ``long`` queue: a
cancelled call's statement stops on the server, and a worker killed while its statement runs
leaves none behind."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import CanonicalKey, ErrorCode, RunContext, ToolBoundary, ToolCallEnvelope
from examples import pgreport
from tasks import CeleryDispatcher
from tasks.app import create_app
from tasks.runtime import get_runtime
from tests import pg_tools
from tests.celery.workers import celery_process
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.pg import running_statements, scratch_database, wait_until

RUN = RunContext(run_id="run-pgw", authorized_tools=frozenset({"sql_report"}))


@dataclass
class ReportWorker:
    boundary: ToolBoundary
    dsn: str
    process: subprocess.Popen[bytes]
    log: Path


@pytest.fixture
def report_worker(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> Iterator[ReportWorker]:
    """A threads worker serving ``tests.pg_tools:registry`` on ``long`` and ``projections``,
    on a broker DB of its own, over a scratch database."""
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB),
        tools="tests.pg_tools:registry",
        visibility_timeout_s=int(pg_tools.WORKER_TIMEOUT_S) + 60,
    )
    broker = flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_pgreport")
    boundary = ToolBoundary(
        store=get_runtime().store, registry=pg_tools.registry, dispatcher=CeleryDispatcher(app)
    )
    log = tmp_path / "worker.log"
    args = ("worker", "-P", "threads", "-c", "4", "-Q", "long,projections", "-n", "pg@%h")
    with (
        scratch_database() as dsn,
        celery_process(
            settings,
            *args,
            "-l",
            "INFO",
            "--without-mingle",
            "--without-gossip",
            log=log,
            extra_env={pgreport.DSN_ENV: dsn},
        ) as process,
    ):
        yield ReportWorker(boundary=boundary, dsn=dsn, process=process, log=log)
    broker.flushdb()


def start_sleep(worker: ReportWorker, call_id: str) -> list[tuple[int, str]]:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id,
        tool_call_id=call_id,
        tool_name="sql_report",
        arguments={"report": {"name": "sleep", "seconds": 100}},
    )
    assert worker.boundary.submit(envelope, RUN).accepted
    return wait_until(lambda: running_statements(worker.dsn), "the statement to start")


def test_cancelling_a_call_stops_its_statement_on_the_server(report_worker: ReportWorker) -> None:
    # Given a report whose statement runs in the worker's session
    [(_pid, query)] = start_sleep(report_worker, "wc1")
    assert query.startswith("FETCH")  # the server-side cursor's batch
    # When the call is cancelled
    cancelled = report_worker.boundary.cancel(RUN.run_id, "wc1")
    # Then the statement stops on the server (at the tool's next stored heartbeat; the bound
    # only catches a statement left running: it would sleep for 100 s)
    assert cancelled.error_code is ErrorCode.CANCELLED
    wait_until(lambda: not running_statements(report_worker.dsn), "the statement to stop")
    # And the call stays CANCELLED, with no raw response
    record = get_runtime().store.get(CanonicalKey(run_id=RUN.run_id, tool_call_id="wc1"))
    assert record is not None and record.error_code is ErrorCode.CANCELLED
    assert record.raw is None
    # And the worker serves the next call
    outcome = report_worker.boundary.invoke(
        ToolCallEnvelope(
            run_id=RUN.run_id,
            tool_call_id="wc2",
            tool_name="sql_report",
            arguments={"report": {"name": "latency_by_service"}},
        ),
        RUN,
        timeout=30,
    )
    assert outcome.result is not None and outcome.result["row_count"] == 5, outcome


def test_a_worker_killed_while_its_statement_runs_leaves_no_statement_running(
    report_worker: ReportWorker,
) -> None:
    # Given a report whose statement runs in the worker's session
    start_sleep(report_worker, "wk1")
    # When the whole worker is killed
    os.killpg(report_worker.process.pid, signal.SIGKILL)
    report_worker.process.wait()
    # Then the server notices its client is gone and ends the statement (PostgreSQL 14+
    # checks the socket every second while a statement runs; the sleep would last 100 s)
    wait_until(lambda: not running_statements(report_worker.dsn), "the statement to end")
