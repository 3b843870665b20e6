"""Traces of tool calls through a real worker (in-process worker thread, Redis broker): one
trace from the caller's span through the execute and project steps, the GenAI attributes,
refused calls with their code, and nothing of a call's content in any span."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from boundary import (
    ErrorCode,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.telemetry.names import CALL_ID
from tasks import CeleryDispatcher
from tasks.settings import Settings
from tasks.wiring.app import EXECUTE, PROJECT, create_app
from tests.celery.conftest import RUN
from tests.conftest import celery_test_settings
from tests.support import celery_tools, otel
from tests.support.celery_tools import SECRET, SECRET_URL, STACK
from tests.support.helpers import wait_until

#: Longest wait for a worker's spans to end (they end after the caller is woken).
SPANS_WAIT_S = 30.0


@pytest.fixture
def spans() -> Iterator[otel.InMemorySpanExporter]:
    otel.install()
    otel.SPANS.clear()
    yield otel.SPANS
    otel.SPANS.clear()


def call(boundary: ToolBoundary, call_id: str, tool: str, arguments: dict[str, Any]) -> ToolOutcome:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )
    return boundary.invoke(envelope, RUN, timeout=30)


def spans_of(exporter: otel.InMemorySpanExporter, call_id: str, count: int) -> list[ReadableSpan]:
    """The call's spans, once ``count`` of them have ended."""

    def ended() -> list[ReadableSpan] | None:
        found = [
            s for s in exporter.get_finished_spans() if (s.attributes or {}).get(CALL_ID) == call_id
        ]
        return found if len(found) >= count else None

    spans: list[ReadableSpan] = wait_until(
        ended, f"{count} ended spans of {call_id}", SPANS_WAIT_S, every=0.05
    )
    return spans


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def test_one_trace_runs_from_the_callers_span_through_execute_and_project(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter
) -> None:
    # Given an agent turn's span
    tracer = trace.get_tracer("agent")
    with tracer.start_as_current_span("agent turn") as turn:
        # When the agent calls a tool through the boundary
        outcome = call(celery_boundary, "traced-1", "lookup", {"query": "alpha"})
    assert outcome.status.value == "READY"

    # Then the submit, execute and project spans share the turn's trace
    found = by_name(spans_of(spans, "traced-1", 3))
    submit = found["tool_boundary.submit lookup"]
    execute = found["execute_tool lookup"]
    project = found["tool_boundary.project lookup"]
    trace_id = turn.get_span_context().trace_id
    assert {s.context.trace_id for s in (submit, execute, project)} == {trace_id}
    # and the submit span is the turn's child, the worker steps the submit span's
    assert submit.parent is not None and submit.parent.span_id == turn.get_span_context().span_id
    assert execute.parent is not None and execute.parent.span_id == submit.context.span_id
    assert project.parent is not None and project.parent.span_id == submit.context.span_id
    assert execute.parent.is_remote and project.parent.is_remote


def test_worker_spans_carry_the_genai_and_boundary_attributes(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter
) -> None:
    call(celery_boundary, "traced-2", "lookup", {"query": "beta"})

    found = by_name(spans_of(spans, "traced-2", 3))
    execute = dict(found["execute_tool lookup"].attributes or {})
    project = dict(found["tool_boundary.project lookup"].attributes or {})
    submit = dict(found["tool_boundary.submit lookup"].attributes or {})
    assert execute == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "traced-2",
        "tool_boundary.run_id": RUN.run_id,
        "tool_boundary.attempt": 1,
        "tool_boundary.status": "PROJECTING",
    }
    assert project == {
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "traced-2",
        "tool_boundary.run_id": RUN.run_id,
        "tool_boundary.attempt": 1,
        "tool_boundary.status": "READY",
        "tool_boundary.evidence_status": "EVIDENCE_FOUND",
    }
    assert submit == {
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "traced-2",
        "tool_boundary.run_id": RUN.run_id,
        "tool_boundary.status": "PROJECTING",
    }


def test_a_failed_tool_marks_its_spans_with_the_code(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter
) -> None:
    outcome = call(celery_boundary, "traced-3", "boom", {"query": "x"})
    assert outcome.error_code is ErrorCode.TOOL_EXECUTION_FAILED

    found = by_name(spans_of(spans, "traced-3", 3))
    for name in ("execute_tool boom", "tool_boundary.project boom"):
        span = found[name]
        assert (span.attributes or {})["error.type"] == "TOOL_EXECUTION_FAILED"
        assert (span.attributes or {})["tool_boundary.status"] == "ERROR"
        assert span.status.status_code is trace.StatusCode.ERROR
        assert not span.status.description


@pytest.mark.parametrize(
    ("tool", "run", "code"),
    [
        ("no_such_tool", RUN, ErrorCode.UNKNOWN_TOOL),
        (
            "lookup",
            RunContext(run_id="run-narrow", authorized_tools=frozenset({"find"})),
            ErrorCode.UNAUTHORIZED,
        ),
    ],
)
def test_a_refused_call_is_traced_with_its_code(
    celery_boundary: ToolBoundary,
    spans: otel.InMemorySpanExporter,
    tool: str,
    run: RunContext,
    code: ErrorCode,
) -> None:
    envelope = ToolCallEnvelope(
        run_id=run.run_id, tool_call_id="refused-1", tool_name=tool, arguments={"q": SECRET}
    )
    submission = celery_boundary.submit(envelope, run)
    assert not submission.accepted

    (span,) = spans_of(spans, "refused-1", 1)
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == code.value
    assert attributes["tool_boundary.status"] == "ERROR"
    assert span.status.status_code is trace.StatusCode.ERROR
    # An unregistered name is not echoed (the model made it up): the span is just "submit".
    expected = "tool_boundary.submit lookup" if tool == "lookup" else "tool_boundary.submit"
    assert span.name == expected


def test_no_span_holds_arguments_raw_responses_exception_text_or_urls(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter
) -> None:
    # Given secrets planted in arguments, a raw response, a tool's and a projector's
    # exception text, and a broker URL's password
    planted = {"query": SECRET, "token": f"{SECRET_URL} {STACK}"}
    call(celery_boundary, "leak-1", "leaky", planted)
    call(celery_boundary, "leak-2", "boom", planted)
    call(celery_boundary, "leak-3", "bad_projector", planted)
    call(celery_boundary, "leak-4", "lookup", {"query": SECRET})
    unreachable = create_app(
        celery_test_settings(broker_url="redis://:hunter2-pass@127.0.0.1:1/0"), name="tb_dead"
    )
    dead = ToolBoundary(
        store=celery_boundary.store,
        registry=celery_boundary.registry,
        dispatcher=CeleryDispatcher(unreachable),
    )
    failed = dead.submit(
        ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id="leak-5", tool_name="lookup", arguments=planted
        ),
        RUN,
    )
    assert failed.outcome is not None
    assert failed.outcome.error_code is ErrorCode.DISPATCH_FAILED
    # and a store whose Redis URL holds a password and does not answer
    lost_store = RedisCanonicalStore.from_url(
        "redis://:hunter2-store@127.0.0.1:1/0", ttl_s=600, socket_connect_timeout=0.5
    )
    no_store = ToolBoundary(
        store=lost_store, registry=celery_boundary.registry, dispatcher=dead.dispatcher
    )
    unstored = no_store.submit(
        ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id="leak-6", tool_name="lookup", arguments=planted
        ),
        RUN,
    )
    assert unstored.outcome is not None
    assert unstored.outcome.error_code is ErrorCode.STORE_UNAVAILABLE
    for call_id, count in (("leak-1", 3), ("leak-2", 3), ("leak-3", 3), ("leak-4", 3)):
        assert len(spans_of(spans, call_id, count)) == count

    # Then no span name, attribute, event, link or status holds any of it
    everything = "\n".join(span.to_json() for span in spans.get_finished_spans())
    # the audit reads the dispatch-failed and store-unavailable calls' spans too
    assert "leak-5" in everything and "leak-6" in everything
    for secret in (
        SECRET,
        "hunter2-pass",
        "hunter2-store",
        "10.9.8.7",
        "Traceback",
        "secrets.py",
        "alpha",
    ):
        assert secret not in everything
    assert "tool broke" not in everything and "projector broke" not in everything
    for span in spans.get_finished_spans():
        assert not span.events


def test_with_the_celery_instrumentation_our_spans_nest_under_its_task_spans(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter, celery_settings: Settings
) -> None:
    # Given opentelemetry-instrumentation-celery in the caller and the worker
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    instrumentor = CeleryInstrumentor()
    instrumentor.instrument()
    try:
        tracer = trace.get_tracer("agent")
        with tracer.start_as_current_span("agent turn") as turn:
            call(celery_boundary, "instrumented-1", "lookup", {"query": "gamma"})
        found = by_name(spans_of(spans, "instrumented-1", 3))
        # The chain (the default) has a project task; a call projected in line (the opt-in)
        # has none: its project step runs in the execute task's span
        project_task = EXECUTE if celery_settings.project_in_line else PROJECT
        wanted = {f"run/{EXECUTE}", f"run/{project_task}"}
        wait_until(
            lambda: wanted <= {s.name for s in spans.get_finished_spans()},
            "the instrumentation's task spans to end",
            SPANS_WAIT_S,
            every=0.05,
        )
    finally:
        instrumentor.uninstrument()

    # Then one trace still, and each worker step's span is a child of the task's own span
    # (not a second root beside it: nothing is wrapped twice)
    trace_id = turn.get_span_context().trace_id
    every = {s.context.span_id: s for s in spans.get_finished_spans()}
    for name, task in (
        ("execute_tool lookup", EXECUTE),
        ("tool_boundary.project lookup", project_task),
    ):
        span = found[name]
        assert span.context.trace_id == trace_id
        assert span.parent is not None and not span.parent.is_remote
        parent = every[span.parent.span_id]
        assert parent.name == f"run/{task}"
        assert parent.context.trace_id == trace_id


def test_calls_are_counted_through_the_opentelemetry_metrics_api(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter
) -> None:
    ready = {"tool": "lookup", "status": "READY", "code": ""}
    failed = {"tool": "boom", "status": "ERROR", "code": "TOOL_EXECUTION_FAILED"}
    refused = {"tool": "", "status": "ERROR", "code": "UNKNOWN_TOOL"}
    before = [otel.count("tool_boundary.calls", **labels) for labels in (ready, failed, refused)]
    executed_before = otel.count("gen_ai.execute_tool.duration", tool="lookup", code="")

    # When two calls succeed, one fails and one is refused
    call(celery_boundary, "counted-1", "lookup", {"query": "one"})
    call(celery_boundary, "counted-2", "lookup", {"query": "two"})
    call(celery_boundary, "counted-3", "boom", {"query": "three"})
    call(celery_boundary, "counted-4", "made_up_tool", {"query": "four"})
    for call_id in ("counted-1", "counted-2", "counted-3"):
        spans_of(spans, call_id, 3)  # the project step has ended, its figures are in

    # Then the counter and the GenAI duration histogram have them by tool and code
    after = [otel.count("tool_boundary.calls", **labels) for labels in (ready, failed, refused)]
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 1, 1]
    assert otel.count("gen_ai.execute_tool.duration", tool="lookup", code="") - executed_before == 2


def test_a_call_the_watchdog_seals_is_counted_while_its_tool_still_hangs(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter
) -> None:
    timed_out = {"tool": "hang_unbounded", "status": "ERROR", "code": "TOOL_TIMEOUT"}
    before = otel.count("tool_boundary.calls", **timed_out)
    celery_tools.HANG.clear()
    try:
        # When a tool run in line hangs past its limit (sealed by the watchdog's thread)
        outcome = call(celery_boundary, "counted-hung", "hang_unbounded", {})
        assert outcome.error_code is not None and outcome.error_code.value == "TOOL_TIMEOUT"
        spans_of(spans, "counted-hung", 1)  # the project step the watchdog sent has ended
        # Then the seal is counted with its tool and code, as a seal on the task's thread is
        assert otel.count("tool_boundary.calls", **timed_out) - before == 1
    finally:
        celery_tools.HANG.set()


def test_asubmit_opens_one_submit_span_in_the_callers_trace(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter
) -> None:
    import asyncio

    async def turn() -> tuple[int, ToolOutcome]:
        with trace.get_tracer("agent").start_as_current_span("async turn") as span:
            envelope = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="async-1",
                tool_name="lookup",
                arguments={"query": "async"},
            )
            outcome = await celery_boundary.ainvoke(envelope, RUN, timeout=30)
            return span.get_span_context().trace_id, outcome

    trace_id, outcome = asyncio.run(turn())

    assert outcome.status.value == "READY"
    found = spans_of(spans, "async-1", 3)
    submits = [s for s in found if s.name.startswith("tool_boundary.submit")]
    assert len(submits) == 1
    assert {s.context.trace_id for s in found} == {trace_id}
    execute = by_name(found)["execute_tool lookup"]
    assert execute.parent is not None and execute.parent.span_id == submits[0].context.span_id


def test_a_retried_call_keeps_its_trace_and_counts_its_attempts(
    celery_boundary: ToolBoundary, spans: otel.InMemorySpanExporter
) -> None:
    # Given a tool whose first attempt overruns its time limit and whose policy retries
    with trace.get_tracer("agent").start_as_current_span("turn") as turn:
        outcome = call(celery_boundary, "retried-1", "slow_first_time", {})
    assert outcome.status.value == "READY", outcome

    # Then both attempts' execute spans are in the turn's trace, with their attempt numbers,
    # and the one project step is attempt 2's
    found = spans_of(spans, "retried-1", 4)
    executes = sorted(
        (s for s in found if s.name == "execute_tool slow_first_time"),
        key=lambda s: (s.attributes or {})["tool_boundary.attempt"],
    )
    assert [(s.attributes or {})["tool_boundary.attempt"] for s in executes] == [1, 2]
    projects = [s for s in found if s.name == "tool_boundary.project slow_first_time"]
    assert [(s.attributes or {})["tool_boundary.attempt"] for s in projects] == [2]
    assert {s.context.trace_id for s in found} == {turn.get_span_context().trace_id}
