"""Traces and metrics of tool calls, in the OpenTelemetry GenAI conventions.

Every span name, metric name and attribute the boundary emits is defined in
``boundary.telemetry.names``; the rest of the code calls in here with one or two lines. Only
``opentelemetry-api`` is imported: without an SDK every call is a no-op of a few microseconds
(measured in bench/README.md).

What a call looks like in a trace (all in the caller's trace):

- ``tool_boundary.submit {tool}`` (PRODUCER), in the caller, child of its current span:
  preflight, the record's creation and the dispatch. A refused call ends here, with
  ``error.type`` = its code.
- ``execute_tool {tool}`` (INTERNAL, ``gen_ai.operation.name = execute_tool``), in the worker:
  the execute step. Its parent travels in the Celery message headers (W3C ``traceparent``,
  the same header ``opentelemetry-instrumentation-celery`` uses). When that instrumentation
  runs, its ``run/<task>`` span is current in the task and ours nests under it instead.
- ``tool_boundary.project {tool}`` (INTERNAL), in the worker: the project step and the seal.

Nothing of a call's content is ever recorded: no arguments, raw response, result, exception
text or URL; only ids, the tool's registered name, statuses, codes and counts. Exceptions
are not recorded on spans (their text may hold secrets). Metric labels are tool names,
statuses and codes only, never run or call ids (cardinality).
"""

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from boundary.telemetry import metrics as _metrics
from boundary.telemetry import spans as _spans
from boundary.telemetry.metrics import (
    GaugeValue,
    MetricSink,
    add_sink,
    read_gauges,
    reaped,
    record,
    set_gauge_source,
    slot_waited,
    stale_holder,
)
from boundary.telemetry.names import (
    CALLS_LIMIT,
    CALLS_RUNNING,
    CALLS_WAITING,
    EXECUTE,
    HEARTBEAT_LAG,
    METRICS,
    PROJECT,
    PROJECTING,
    SECONDS_BUCKETS,
    Metric,
)
from boundary.telemetry.spans import (
    WorkerStep,
    sealed,
    step_record,
    stored,
    tool_starts,
    trace_headers,
    traced_asubmit,
    traced_submit,
    traced_submit_many,
    worker_step,
)


def configure(
    *,
    enabled: bool = True,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> None:
    """Turns this process's call telemetry off (``enabled=False``: no span, no header, no
    figure) or on, recording through the given providers instead of the global ones
    (``None``, the default: whatever ``opentelemetry.trace``/``metrics`` have, a no-op
    without an SDK). The benchmark measures the three ways (bench/README.md).

    Without an SDK no span is started at all (metrics are still kept); a global provider set
    later is noticed within a second, or at once when ``configure()`` is called after it."""
    _spans.configure(enabled, tracer_provider)
    _metrics.configure(enabled, meter_provider)


__all__ = [
    "CALLS_LIMIT",
    "CALLS_RUNNING",
    "CALLS_WAITING",
    "EXECUTE",
    "HEARTBEAT_LAG",
    "METRICS",
    "PROJECT",
    "PROJECTING",
    "SECONDS_BUCKETS",
    "GaugeValue",
    "Metric",
    "MetricSink",
    "WorkerStep",
    "add_sink",
    "configure",
    "read_gauges",
    "reaped",
    "record",
    "sealed",
    "set_gauge_source",
    "slot_waited",
    "stale_holder",
    "step_record",
    "stored",
    "tool_starts",
    "trace_headers",
    "traced_asubmit",
    "traced_submit",
    "traced_submit_many",
    "worker_step",
]
