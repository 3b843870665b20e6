"""``telemetry.configure``: off means no span, no header and no figure; on again restores
them (the benchmark's three modes rely on it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace

from boundary import CanonicalKey, telemetry
from boundary.telemetry.names import CALLS
from tests.support import otel

KEY = CanonicalKey(run_id="run-cfg", tool_call_id="call-cfg")


@pytest.fixture
def turned_off() -> Iterator[None]:
    otel.install()
    otel.SPANS.clear()
    telemetry.configure(enabled=False)
    yield
    telemetry.configure()


def test_off_starts_no_span_injects_no_header_and_counts_nothing(turned_off: None) -> None:
    before = otel.count(CALLS.name, tool="t", status="READY", code="")
    with trace.get_tracer("agent").start_as_current_span("turn"):
        assert telemetry.trace_headers() == {}
        with telemetry.worker_step(telemetry.EXECUTE, KEY) as step:
            assert not step.span.get_span_context().is_valid
    telemetry.record(CALLS, 1, tool="t", status="READY", code="")
    assert [s.name for s in otel.SPANS.get_finished_spans()] == ["turn"]
    assert otel.count(CALLS.name, tool="t", status="READY", code="") == before


def test_on_again_traces_and_counts(turned_off: None) -> None:
    telemetry.configure()
    before = otel.count(CALLS.name, tool="t", status="READY", code="")
    with trace.get_tracer("agent").start_as_current_span("turn"):
        assert "traceparent" in telemetry.trace_headers()
        with telemetry.worker_step(telemetry.EXECUTE, KEY) as step:
            assert step.span.get_span_context().is_valid
    telemetry.record(CALLS, 1, tool="t", status="READY", code="")
    assert "execute_tool" in [s.name for s in otel.SPANS.get_finished_spans()]
    assert otel.count(CALLS.name, tool="t", status="READY", code="") == before + 1
