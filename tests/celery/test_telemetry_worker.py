"""Telemetry across processes: a real ``celery worker`` subprocess (prefork pool) that
exports its spans to a file, and serves ``/metrics``."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from opentelemetry import trace
from prometheus_client.parser import text_string_to_metric_families

from boundary import RunContext, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support import otel
from tests.support.helpers import wait_until

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
    def ended() -> list[dict[str, Any]] | None:
        found = [
            s
            for s in otel.read_span_file(path)
            if s["attributes"].get("gen_ai.tool.call.id") == call_id  # type: ignore[union-attr]
        ]
        return found if len(found) >= count else None

    spans: list[dict[str, Any]] = wait_until(
        ended, f"{count} ended spans of {call_id}", SPANS_WAIT_S, every=0.1
    )
    return spans


def test_a_worker_process_continues_the_callers_trace(
    isolated: tuple[Any, Celery, ToolBoundary], tmp_path: Path
) -> None:
    # Given a prefork worker exporting its spans to a file
    settings, _, boundary = isolated
    span_file = tmp_path / "spans.jsonl"
    env = {
        "TOOL_BOUNDARY_TOOLS": "tests.support.otel_tools:registry",
        "TB_TEST_SPAN_FILE": str(span_file),
    }
    otel.install()
    log = tmp_path / "w.log"
    with celery_process(
        settings,
        *worker_args("otel", pool="prefork", concurrency=2),
        log=log,
        extra_env=env,
    ):
        # When an agent turn calls a tool, and another that fails
        with trace.get_tracer("agent").start_as_current_span("agent turn") as turn:
            for call_id, tool in (("xproc-1", "lookup"), ("xproc-2", "boom")):
                envelope = ToolCallEnvelope(
                    run_id=RUN.run_id,
                    tool_call_id=call_id,
                    tool_name=tool,
                    arguments={"query": "delta"},
                )
                boundary.invoke(envelope, RUN, timeout=30)
        spans = {s["name"]: s for s in worker_spans(span_file, "xproc-1", 2)}
        failed = {s["name"]: s for s in worker_spans(span_file, "xproc-2", 2)}

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
    assert spans["tool_boundary.project lookup"]["attributes"]["tool_boundary.status"] == "READY"
    # and the worker's log line of the failed call carries its trace and span ids
    execute = failed["execute_tool boom"]
    assert execute["attributes"]["error.type"] == "TOOL_EXECUTION_FAILED"
    (line,) = [x for x in log.read_text().splitlines() if "xproc-2 sealed ERROR" in x]
    assert f"trace_id={trace_id[2:]}" in line
    assert f"span_id={execute['context']['span_id'][2:]}" in line


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_prefork_worker_serves_the_counts_of_its_children_by_tool_and_code(
    isolated: tuple[Any, Celery, ToolBoundary], tmp_path: Path
) -> None:
    # Given a prefork worker with two children serving /metrics
    settings, _, boundary = isolated
    port = free_port()
    env = {"TOOL_BOUNDARY_METRICS_PORT": str(port)}
    run = RunContext(run_id="metrics-run", authorized_tools=RUN.authorized_tools)
    calls = [("lookup", 14), ("boom", 4), ("invalid_evidence", 2)]
    with celery_process(
        settings,
        *worker_args("metrics", pool="prefork", concurrency=2),
        log=tmp_path / "w.log",
        extra_env=env,
    ):
        # When 20 calls run
        n = 0
        for tool, count in calls:
            for _ in range(count):
                n += 1
                envelope = ToolCallEnvelope(
                    run_id=run.run_id,
                    tool_call_id=f"m-{n}",
                    tool_name=tool,
                    arguments={"query": "epsilon"},
                )
                outcome = boundary.invoke(envelope, run, timeout=30)
                assert not outcome.pending
        # (the project task's figures are written just after the seal wakes the caller)
        deadline = time.monotonic() + 30

        def projected() -> tuple[str, dict[Any, float]] | None:
            text = scrape(port)
            found = samples(text)
            count = sum(
                v
                for (name, _), v in found.items()
                if name == "tool_boundary_project_duration_seconds_count"
            )
            return (text, found) if count >= 20 else None

        text, found = wait_until(projected, "the figures of 20 project steps", 30, every=0.2)
        # and two calls still run (the PROJECTING gauge is read from the store when scraped)
        for n in (1, 2):
            started = tmp_path / f"started-{n}"
            envelope = ToolCallEnvelope(
                run_id=run.run_id,
                tool_call_id=f"s-{n}",
                tool_name="sleepy",
                arguments={"seconds": 3, "started": str(started)},
            )
            assert boundary.submit(envelope, run).accepted
        wait_until(
            lambda: all((tmp_path / f"started-{n}").exists() for n in (1, 2)),
            "the sleepy calls to start",
            deadline + 30 - time.monotonic(),
            every=0.05,
        )
        while_running = samples(scrape(port))
        running = while_running[("tool_boundary_projecting_calls", frozenset())]
        lag = while_running.get(("tool_boundary_heartbeat_lag_seconds", frozenset()))

    # Then /metrics counts the calls by tool, status and code, from both children
    def value(name: str, **labels: str) -> float | None:
        return found.get((name, frozenset(labels.items())))

    calls_total = "tool_boundary_calls_total"
    assert value(calls_total, tool="lookup", status="READY", code="") == 14
    assert value(calls_total, tool="boom", status="ERROR", code="TOOL_EXECUTION_FAILED") == 4
    assert (
        value(calls_total, tool="invalid_evidence", status="ERROR", code="INVALID_EVIDENCE_STATUS")
        == 2
    )
    duration = "gen_ai_execute_tool_duration_seconds_count"
    assert value(duration, tool="lookup", code="") == 14
    assert value(duration, tool="boom", code="TOOL_EXECUTION_FAILED") == 4
    assert value("tool_boundary_queue_wait_seconds_count", tool="lookup") == 14
    assert value("tool_boundary_project_duration_seconds_count", tool="boom") == 4
    ended = "tool_boundary_call_duration_seconds_count"
    assert value(ended, tool="lookup", status="READY", code="") == 14
    assert value("tool_boundary_projecting_calls") == 0
    assert running == 2
    # (the heartbeat lag appears once a tool runs: since its start, as sleepy never beats)
    assert value("tool_boundary_heartbeat_lag_seconds") is None
    assert lag is not None and lag >= 0
    # and never a run or call id
    assert "metrics-run" not in text and "m-1" not in text
