"""Spans of a call: ``tool_boundary.submit`` in the caller, ``execute_tool`` and
``tool_boundary.project`` in the worker, one trace through the message headers."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from boundary.models import (
    CanonicalKey,
    CanonicalRecord,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
    is_safe_id,
)
from boundary.telemetry.metrics import record
from boundary.telemetry.names import (
    ATTEMPT,
    CALL_DURATION,
    CALL_ID,
    CALLS,
    ERROR_TYPE,
    EVIDENCE,
    EXECUTE,
    EXECUTE_DURATION,
    EXECUTE_SPAN,
    EXECUTE_TOOL,
    OPERATION,
    PROJECT,
    PROJECT_DURATION,
    PROJECT_SPAN,
    QUEUE_WAIT,
    REPLAYED,
    RUN_ID,
    SCOPE,
    STATUS,
    SUBMIT_MANY_SPAN,
    SUBMIT_SPAN,
    TOOL_NAME,
    TURN_CALLS,
)

if TYPE_CHECKING:
    from boundary.registry import ToolRegistry

_tracer = trace.get_tracer(SCOPE)
#: False: no span is started, no header injected (``configure``).
_on = True


#: The provider ``configure`` gave (``None``: the global one).
_provider: trace.TracerProvider | None = None
#: Global providers of the API alone: their spans record nothing, so none is started.
_NO_SDK = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def configure(enabled: bool, provider: trace.TracerProvider | None) -> None:
    """Spans on or off, from ``provider`` or (``None``) the global tracer provider."""
    global _tracer, _on, _provider, _no_sdk_until
    _on, _provider, _no_sdk_until = enabled, provider, 0.0
    _tracer = trace.get_tracer(SCOPE) if provider is None else provider.get_tracer(SCOPE)


#: Until when the global provider is known to be the API's alone (it is checked again
#: once a second: an SDK set later is used from then on).
_no_sdk_until = 0.0
#: Seconds a "no SDK" answer is kept (the check reads the environment).
NO_SDK_RECHECK_S = 1.0


def _tracing() -> bool:
    """Whether spans are worth starting: a provider was given, or the global one is an SDK's.
    Without one the steps still keep their figures (metrics), on a span that records nothing:
    a no-op span costs about 10 us a step, most of this path (bench.studies.telemetry_hooks)."""
    global _no_sdk_until
    if _provider is not None:
        return True
    now = time.monotonic()
    if now < _no_sdk_until:
        return False
    if isinstance(trace.get_tracer_provider(), _NO_SDK):
        _no_sdk_until = now + NO_SDK_RECHECK_S
        return False
    return True


# --- Context propagation ------------------------------------------------------------------


def trace_headers() -> dict[str, str]:
    """The current trace context as message headers (``traceparent``...); empty when there
    is no trace (no SDK, or no span): the message then carries nothing extra."""
    carrier: dict[str, str] = {}
    if _on:
        propagate.inject(carrier)
    return carrier


class _MessageGetter(Getter[object]):
    """Reads a propagation field from a mapping or as an attribute (Celery's ``task.request``,
    where a message's headers become attributes)."""

    def get(self, carrier: object, key: str) -> list[str] | None:
        value = carrier.get(key) if isinstance(carrier, Mapping) else getattr(carrier, key, None)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: object) -> list[str]:
        return []


_getter = _MessageGetter()


def _parent(carrier: object) -> Context | None:
    """The worker step's parent: the current span when something (the Celery
    instrumentation) already started one for this task, else the message's trace context."""
    if trace.get_current_span().get_span_context().is_valid or carrier is None:
        return None
    return propagate.extract(carrier, getter=_getter)


# --- Caller side: a span per submit -------------------------------------------------------


class _HasRegistry(Protocol):
    @property
    def registry(self) -> ToolRegistry: ...


#: Set while a submit span is open: ``asubmit`` on a thread calls ``submit``, one span.
_submitting: ContextVar[bool] = ContextVar("tool_boundary_submitting", default=False)

B = TypeVar("B", bound=_HasRegistry)
P = ParamSpec("P")


def _tool_of(registry: ToolRegistry, envelope: ToolCallEnvelope) -> str:
    """The envelope's tool name if it is registered, else "" (a model's made-up name is
    neither a safe attribute nor a bounded label)."""
    name = envelope.tool_name
    return name if isinstance(name, str) and registry.get(name) is not None else ""


@contextmanager
def _submit_span(
    registry: ToolRegistry, envelope: ToolCallEnvelope, run: RunContext
) -> Iterator[_Submit]:
    tool = _tool_of(registry, envelope)
    token = _submitting.set(True)
    try:
        if not _tracing():
            yield _Submit(trace.INVALID_SPAN, tool)
            return
        with _tracer.start_as_current_span(
            f"{SUBMIT_SPAN} {tool}" if tool else SUBMIT_SPAN,
            kind=SpanKind.PRODUCER,
            attributes=_submit_attributes(tool, envelope, run),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield _Submit(span, tool)
    finally:
        _submitting.reset(token)


def _submit_attributes(tool: str, envelope: ToolCallEnvelope, run: RunContext) -> dict[str, str]:
    attributes: dict[str, str] = {}
    if tool:
        attributes[TOOL_NAME] = tool
    call_id, run_id = envelope.tool_call_id, run.run_id
    if call_id is not None and is_safe_id(call_id):
        attributes[CALL_ID] = call_id
    if is_safe_id(run_id):
        attributes[RUN_ID] = run_id
    return attributes


@dataclass(frozen=True)
class _Submit:
    span: Span
    tool: str

    def done(self, submission: Submission) -> Submission:
        if submission.accepted:
            self.span.set_attribute(STATUS, "PROJECTING")
            if submission.replayed:
                self.span.set_attribute(REPLAYED, True)
            return submission
        outcome = submission.outcome
        if outcome is None:
            return submission
        _set_outcome(self.span, outcome)
        if outcome.error_code is not None:
            record(
                CALLS,
                1,
                tool=self.tool,
                status=outcome.status.value,
                code=outcome.error_code.value,
            )
        return submission


def traced_submit(
    submit: Callable[Concatenate[B, ToolCallEnvelope, RunContext, P], Submission],
) -> Callable[Concatenate[B, ToolCallEnvelope, RunContext, P], Submission]:
    """Wraps ``ToolBoundary.submit`` in its span."""

    @functools.wraps(submit)
    def traced(
        boundary: B,
        envelope: ToolCallEnvelope,
        run: RunContext,
        /,
        *args: P.args,
        **kw: P.kwargs,
    ) -> Submission:
        if _submitting.get() or not _on:
            return submit(boundary, envelope, run, *args, **kw)
        with _submit_span(boundary.registry, envelope, run) as span:
            return span.done(submit(boundary, envelope, run, *args, **kw))

    return traced


def traced_asubmit(
    asubmit: Callable[Concatenate[B, ToolCallEnvelope, RunContext, P], Awaitable[Submission]],
) -> Callable[Concatenate[B, ToolCallEnvelope, RunContext, P], Awaitable[Submission]]:
    """Wraps ``asubmit`` in the same span as ``submit``."""

    @functools.wraps(asubmit)
    async def traced(
        boundary: B,
        envelope: ToolCallEnvelope,
        run: RunContext,
        /,
        *args: P.args,
        **kw: P.kwargs,
    ) -> Submission:
        if _submitting.get() or not _on:
            return await asubmit(boundary, envelope, run, *args, **kw)
        with _submit_span(boundary.registry, envelope, run) as span:
            return span.done(await asubmit(boundary, envelope, run, *args, **kw))

    return traced


def traced_submit_many(
    submit_many: Callable[[B, Sequence[ToolCallEnvelope], RunContext], list[Submission]],
) -> Callable[[B, Sequence[ToolCallEnvelope], RunContext], list[Submission]]:
    """Wraps ``submit_many`` in ONE span for the turn (``tool_boundary.submit_many``,
    PRODUCER: the turn's execute steps are its children) and records each refused call's
    ``tool_boundary.calls`` as ``submit`` does (the calls share one script and one publish,
    so they have no span each)."""

    @functools.wraps(submit_many)
    def traced(
        boundary: B, envelopes: Sequence[ToolCallEnvelope], run: RunContext
    ) -> list[Submission]:
        if _submitting.get() or not _on:
            return submit_many(boundary, envelopes, run)
        token = _submitting.set(True)
        try:
            if not _tracing():
                submissions = submit_many(boundary, envelopes, run)
            else:
                attributes: dict[str, str | int] = {TURN_CALLS: len(envelopes)}
                if is_safe_id(run.run_id):
                    attributes[RUN_ID] = run.run_id
                with _tracer.start_as_current_span(
                    SUBMIT_MANY_SPAN,
                    kind=SpanKind.PRODUCER,
                    attributes=attributes,
                    record_exception=False,
                    set_status_on_exception=False,
                ):
                    submissions = submit_many(boundary, envelopes, run)
        finally:
            _submitting.reset(token)
        registry = boundary.registry
        for envelope, submission in zip(envelopes, submissions, strict=True):
            # A non-recording span: only the refused call's metric is recorded.
            _Submit(trace.INVALID_SPAN, _tool_of(registry, envelope)).done(submission)
        return submissions

    return traced


def _set_outcome(span: Span, outcome: ToolOutcome) -> None:
    span.set_attribute(STATUS, outcome.status.value)
    if outcome.evidence_status is not None:
        span.set_attribute(EVIDENCE, outcome.evidence_status.value)
    if outcome.error_code is not None:
        span.set_attribute(ERROR_TYPE, outcome.error_code.value)
        # No description: it would be free text.
        span.set_status(Status(StatusCode.ERROR))


# --- Worker side: a span per step ---------------------------------------------------------


@dataclass
class WorkerStep:
    """A worker step in progress: its span and what the step learnt of the call."""

    span: Span
    step: str
    started: float = field(default_factory=time.monotonic)
    tool: str = ""
    created_at: float | None = None
    tool_started: float | None = None
    attempt: int = 1
    code: str = ""

    def outcome(self, outcome: ToolOutcome) -> None:
        """The call's outcome as the step ends (the project step's return)."""
        _set_outcome(self.span, outcome)
        if outcome.error_code is not None:
            self.code = outcome.error_code.value


_current: ContextVar[WorkerStep | None] = ContextVar("tool_boundary_step", default=None)


def worker_step(
    step: str, key: CanonicalKey, carrier: object = None
) -> AbstractContextManager[WorkerStep]:
    """The span of a worker step (``EXECUTE`` or ``PROJECT``) of the call ``key``, in the
    trace ``carrier`` (the message's headers, or Celery's ``task.request``) carries.

    Without spans to start (no SDK), the step's state alone is current while it runs
    (``_Stepping``, an object rather than a generator: this runs on every step)."""
    if not _on:
        return nullcontext(WorkerStep(trace.INVALID_SPAN, step))
    if not _tracing():
        return _Stepping(trace.INVALID_SPAN, step)
    return _traced_step(step, key, carrier)


@contextmanager
def _traced_step(step: str, key: CanonicalKey, carrier: object) -> Iterator[WorkerStep]:
    attributes = {CALL_ID: key.tool_call_id, RUN_ID: key.run_id}
    if step == EXECUTE:
        attributes[OPERATION] = EXECUTE_TOOL
    with (
        _tracer.start_as_current_span(
            EXECUTE_SPAN if step == EXECUTE else PROJECT_SPAN,
            context=_parent(carrier),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span,
        _Stepping(span, step) as state,
    ):
        yield state


class _Stepping:
    """The step is current (the hooks below find it) and its figures are kept at its end."""

    __slots__ = ("_state", "_token")

    def __init__(self, span: Span, step: str) -> None:
        self._state = WorkerStep(span, step)

    def __enter__(self) -> WorkerStep:
        self._token = _current.set(self._state)
        return self._state

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)
        _finish(self._state)


def _finish(state: WorkerStep) -> None:
    if not state.tool:
        return
    if state.step == EXECUTE and state.tool_started is not None:
        took = time.monotonic() - state.tool_started
        record(EXECUTE_DURATION, took, tool=state.tool, code=state.code)
    elif state.step == PROJECT:
        record(PROJECT_DURATION, time.monotonic() - state.started, tool=state.tool)


def step_record(record_: CanonicalRecord) -> None:
    """The step read the call's record: names the span after its tool."""
    state = _current.get()
    if state is None:
        return
    state.tool = record_.tool_name
    state.created_at = record_.created_at.timestamp()
    # The record's attempt (long-running tools' retries); 1 for a record without one.
    state.attempt = int(getattr(record_, "attempt", None) or 1)
    span = state.span
    if span.is_recording():
        span.set_attribute(TOOL_NAME, record_.tool_name)
        span.set_attribute(ATTEMPT, state.attempt)
        name = EXECUTE_SPAN if state.step == EXECUTE else PROJECT_SPAN
        span.update_name(f"{name} {record_.tool_name}")


def tool_starts(record_: CanonicalRecord) -> None:
    """The execute step is about to run the tool: its queue wait ends."""
    state = _current.get()
    if state is None:
        return
    state.tool_started = time.monotonic()
    if state.attempt == 1 and state.created_at is not None:
        waited = max(time.time() - state.created_at, 0.0)
        record(QUEUE_WAIT, waited, tool=record_.tool_name)


def sealed(outcome: ToolOutcome) -> None:
    """This step sealed the call with ``outcome`` (the seal's write succeeded): counts it."""
    state = _current.get()
    if state is None:
        return
    state.outcome(outcome)
    status, code = outcome.status.value, state.code
    record(CALLS, 1, tool=state.tool, status=status, code=code)
    if state.created_at is not None:
        took = max(time.time() - state.created_at, 0.0)
        record(CALL_DURATION, took, tool=state.tool, status=status, code=code)


def stored() -> None:
    """The execute step kept the raw response: the call goes on PROJECTING."""
    state = _current.get()
    if state is not None:
        state.span.set_attribute(STATUS, "PROJECTING")
