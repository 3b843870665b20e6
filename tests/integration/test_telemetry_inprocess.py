"""The in-process dispatcher's steps are traced like a worker's: one trace from the caller's
span through the execute and project spans, inline and on its background thread."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from boundary import (
    InProcessDispatcher,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.telemetry.names import CALL_ID, REPLAYED
from tests.support import otel
from tests.support.celery_tools import build_registry

RUN = RunContext(run_id="run-inproc", authorized_tools=frozenset({"lookup"}))


@pytest.mark.parametrize("inline", [True, False])
def test_in_process_steps_continue_the_callers_trace(
    store: RedisCanonicalStore, inline: bool
) -> None:
    otel.install()
    otel.SPANS.clear()
    registry = build_registry()
    boundary = ToolBoundary(
        store=store,
        registry=registry,
        dispatcher=InProcessDispatcher(store, registry, inline=inline),
    )
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id="inproc-1", tool_name="lookup", arguments={"query": "x"}
    )
    with trace.get_tracer("agent").start_as_current_span("turn") as turn:
        outcome = boundary.invoke(envelope, RUN, timeout=30)
    assert outcome.status.value == "READY"

    spans = {
        s.name.split(" ")[0]: s
        for s in otel.SPANS.get_finished_spans()
        if (s.attributes or {}).get(CALL_ID) == "inproc-1"
    }
    assert set(spans) == {"tool_boundary.submit", "execute_tool", "tool_boundary.project"}
    trace_id = turn.get_span_context().trace_id
    assert {s.context.trace_id for s in spans.values()} == {trace_id}
    submit_id = spans["tool_boundary.submit"].context.span_id
    for name in ("execute_tool", "tool_boundary.project"):
        parent = spans[name].parent
        assert parent is not None and parent.span_id == submit_id


def test_a_replayed_submission_is_marked_on_its_span(store: RedisCanonicalStore) -> None:
    # Given a call already made
    otel.install()
    registry = build_registry()
    boundary = ToolBoundary(
        store=store,
        registry=registry,
        dispatcher=InProcessDispatcher(store, registry, inline=True),
    )
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id="replay-1", tool_name="lookup", arguments={"query": "x"}
    )
    boundary.invoke(envelope, RUN, timeout=30)
    otel.SPANS.clear()
    # When it is made again with replay
    assert boundary.submit(envelope, RUN, replay=True).replayed
    # Then its submit span says it was replayed (and nothing else ran)
    spans = [
        s
        for s in otel.SPANS.get_finished_spans()
        if (s.attributes or {}).get(CALL_ID) == "replay-1"
    ]
    assert [s.name for s in spans] == ["tool_boundary.submit lookup"]
    assert (spans[0].attributes or {}).get(REPLAYED) is True
