"""The PostgreSQL report tool in a real ``celery worker`` process on the ``long`` queue: a
cancelled call's statement stops on the server; a worker killed while its statement runs
leaves none behind, and its report runs again (attempt 2) on another worker."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from celery import Celery

from bench.rig.workers import worker_args
from bench.studies import pg_tools
from boundary import (
    CanonicalKey,
    ErrorCode,
    InvocationStatus,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.reaper import Retries, reap_once
from examples import pgreport
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import create_app
from tests.celery.workers import celery_process
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.helpers import wait_until
from tests.support.pg import running_statements, scratch_database

RUN = RunContext(run_id="run-pgw", authorized_tools=frozenset({"sql_report"}))


@dataclass
class ReportWorker:
    settings: Settings
    app: Celery
    boundary: ToolBoundary
    dsn: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def report_worker_process(
    settings: Settings, dsn: str, log: Path, name: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A threads worker serving ``bench.studies.pg_tools:registry`` on ``long`` and
    ``projections``."""
    args = worker_args("threads", 4, ("long", "projections"), node=f"{name}@%h")
    with celery_process(settings, *args, log=log, extra_env={pgreport.DSN_ENV: dsn}) as process:
        yield process


@pytest.fixture
def report_worker(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> Iterator[ReportWorker]:
    """A report worker on a broker DB of its own, over a scratch database."""
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB),
        tools="bench.studies.pg_tools:registry",
        visibility_timeout_s=int(pg_tools.WORKER_TIMEOUT_S) + 60,
    )
    broker = flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_pgreport")
    boundary = ToolBoundary(
        store=get_runtime().store, registry=pg_tools.registry, dispatcher=CeleryDispatcher(app)
    )
    log = tmp_path / "worker.log"
    with scratch_database() as dsn, report_worker_process(settings, dsn, log, "pg") as process:
        yield ReportWorker(settings, app, boundary, dsn, process, log)
    broker.flushdb()


def start_sleep(worker: ReportWorker, call_id: str, seconds: float = 100) -> list[tuple[int, str]]:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id,
        tool_call_id=call_id,
        tool_name="sql_report",
        arguments={"report": {"name": "sleep", "seconds": seconds}},
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


def reap_until_retried(worker: ReportWorker) -> None:
    """Reaper passes (as beat would run them) until one hands the lost call to a new attempt."""
    runtime = get_runtime()
    settings = runtime.settings
    retries = Retries(
        registry=pg_tools.registry,
        sender=CeleryDispatcher(worker.app),
        max_redispatches=settings.max_redispatches,
        max_pending_s=settings.max_pending_s,
        reap_grace_s=settings.reap_grace_s,
    )

    def retried() -> bool:
        reaped = reap_once(
            runtime.store,
            lambda key: None,
            retry_after_s=settings.projection_timeout_s,
            max_reprojections=settings.max_reprojections,
            retries=retries,
        )
        if not reaped.retried:
            time.sleep(0.5)
        return bool(reaped.retried)

    # due once silent for the tool's heartbeat timeout after the kill
    wait_until(retried, "the reaper to retry the call", patience=pg_tools.HEARTBEAT_TIMEOUT_S + 30)


def test_a_report_whose_worker_was_killed_runs_again_on_another_worker(
    report_worker: ReportWorker, tmp_path: Path
) -> None:
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="wr1")
    # Given a report whose statement runs in a worker that is then killed
    start_sleep(report_worker, "wr1", seconds=2)
    os.killpg(report_worker.process.pid, signal.SIGKILL)
    report_worker.process.wait()
    # When the reaper finds the call silent past its heartbeat timeout, with another worker up
    with report_worker_process(
        report_worker.settings, report_worker.dsn, tmp_path / "second.log", "pg2"
    ):
        reap_until_retried(report_worker)
        outcome = report_worker.boundary.outcome(RUN.run_id, "wr1", timeout=60)
    # Then the report ran again as attempt 2 and its call is READY, with one raw response
    assert outcome.status is InvocationStatus.READY, outcome
    record = get_runtime().store.get(key)
    assert record is not None and record.attempt == 2
    assert record.raw is not None and '"slept"' in record.raw
    # And no statement of either attempt is left on the server
    wait_until(lambda: not running_statements(report_worker.dsn), "no statement left")
