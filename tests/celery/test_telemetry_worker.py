"""Telemetry across processes: a real ``celery worker`` subprocess (prefork pool) that
exports its spans to a file, and serves ``/metrics``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from opentelemetry import trace

from boundary import ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.app import create_app
from tasks.runtime import get_runtime
from tests import otel
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url

#: Longest wait for the worker's spans to reach the file.
SPANS_WAIT_S = 30.0


@pytest.fixture
def isolated(
    redis_client: redis.Redis, celery_session_app: Celery
) -> Iterator[tuple[Any, Celery, ToolBoundary]]:
    """Settings, client app and boundary on a broker DB of their own (the in-process worker
    never sees these messages)."""
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))
    broker = flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_telemetry")
    yield settings, app, get_runtime().boundary(CeleryDispatcher(app))
    broker.flushdb()


def worker_spans(path: Path, call_id: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + SPANS_WAIT_S
    while True:
        found = [
            s
            for s in otel.read_span_file(path)
            if s["attributes"].get("gen_ai.tool.call.id") == call_id  # type: ignore[union-attr]
        ]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_worker_process_continues_the_callers_trace(
    isolated: tuple[Any, Celery, ToolBoundary], tmp_path: Path
) -> None:
    # Given a prefork worker exporting its spans to a file
    settings, _, boundary = isolated
    span_file = tmp_path / "spans.jsonl"
    env = {"TOOL_BOUNDARY_TOOLS": "tests.otel_tools:registry", "TB_TEST_SPAN_FILE": str(span_file)}
    otel.install()
    with celery_process(
        settings,
        *worker_args("otel", pool="prefork", concurrency=2),
        log=tmp_path / "w.log",
        extra_env=env,
    ):
        # When an agent turn calls a tool
        with trace.get_tracer("agent").start_as_current_span("agent turn") as turn:
            envelope = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="xproc-1",
                tool_name="lookup",
                arguments={"query": "delta"},
            )
            outcome = boundary.invoke(envelope, RUN, timeout=30)
        assert outcome.status.value == "READY", outcome.error_code
        spans = {s["name"]: s for s in worker_spans(span_file, "xproc-1", 2)}

    # Then the worker's execute and project spans are in the turn's trace, children of the
    # caller's submit span
    trace_id = f"0x{turn.get_span_context().trace_id:032x}"
    submit = next(
        s
        for s in otel.SPANS.get_finished_spans()
        if (s.attributes or {}).get("gen_ai.tool.call.id") == "xproc-1"
    )
    submit_id = f"0x{submit.context.span_id:016x}"
    for name in ("execute_tool lookup", "tool_boundary.project lookup"):
        span = spans[name]
        assert span["context"]["trace_id"] == trace_id
        assert span["parent_id"] == submit_id
    assert spans["execute_tool lookup"]["attributes"]["gen_ai.operation.name"] == "execute_tool"
