"""A model turn submitted at once (``submit_many``) is traced as one span, and its refused
calls are counted as ``submit`` counts them."""

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
from boundary.telemetry.names import CALL_ID, CALLS, RUN_ID, TURN_CALLS
from tests.support import otel
from tests.support.celery_tools import build_registry

pytestmark = pytest.mark.usefixtures("redis_client")

#: The labels of a refused call's count (``submit``'s, for an unauthorized tool).
REFUSED = {"tool": "boom", "status": "ERROR", "code": "UNAUTHORIZED"}


def test_a_turn_is_one_span_and_its_refused_calls_are_counted(store: RedisCanonicalStore) -> None:
    otel.install()
    otel.SPANS.clear()
    registry = build_registry()
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    run = RunContext(run_id="run-turn-otel", authorized_tools=frozenset({"lookup"}))
    turn = [
        ToolCallEnvelope(
            run_id=run.run_id, tool_call_id=f"otel-{n}", tool_name=tool, arguments={"query": "x"}
        )
        for n, tool in enumerate(("lookup", "boom", "lookup"))
    ]
    refused_before = otel.count(CALLS.name, **REFUSED)
    # When an agent's turn is invoked at once
    with trace.get_tracer("agent").start_as_current_span("turn") as agent_turn:
        outcomes = boundary.invoke_many(turn, run, timeout=30)
    assert [o.status.value for o in outcomes] == ["READY", "ERROR", "READY"]
    finished = otel.SPANS.get_finished_spans()
    # Then the turn is one submit span, in the agent's trace, naming its run and size
    (many,) = [s for s in finished if s.name == "tool_boundary.submit_many"]
    assert many.attributes is not None
    assert many.attributes[TURN_CALLS] == 3 and many.attributes[RUN_ID] == run.run_id
    assert many.context.trace_id == agent_turn.get_span_context().trace_id
    # And each accepted call's execute step is its child
    executes = [
        s for s in finished
        if s.name.startswith("execute_tool") and (s.attributes or {}).get(CALL_ID) in
        ("otel-0", "otel-2")
    ]  # fmt: skip
    assert len(executes) == 2
    assert all(s.parent is not None and s.parent.span_id == many.context.span_id for s in executes)
    # And the refused call is counted as submit counts it
    refused_after = otel.count(CALLS.name, **REFUSED)
    assert refused_after - refused_before == 1
