"""Recording the metrics: the OpenTelemetry metrics API (a no-op without an SDK), plus any
sink a process adds (the worker's Prometheus endpoint, ``tasks.worker.metrics_endpoint``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import (
    CallbackOptions,
    Counter,
    Histogram,
    ObservableGauge,
    Observation,
)

from boundary.telemetry.names import (
    METRICS,
    REAPER_REPROJECTIONS,
    REAPER_SEALS,
    SCOPE,
    SECONDS_BUCKETS,
    SLOT_WAIT,
    STALE_HOLDERS,
    Metric,
)


class MetricSink(Protocol):
    """A second place recorded values go (the worker's Prometheus endpoint, ``tasks``)."""

    def record(self, metric: Metric, value: float, labels: Mapping[str, str]) -> None: ...


#: A gauge's value: one number, or one per tool (a gauge labelled by ``tool``).
GaugeValue = float | Mapping[str, float]
#: What the gauges read when observed (``set_gauge_source``): metric name -> value.
GaugeSource = Callable[[], Mapping[str, GaugeValue]]
_gauge_source: GaugeSource | None = None


def set_gauge_source(source: GaugeSource | None) -> None:
    """Where this process's gauges (``PROJECTING``, ``HEARTBEAT_LAG``) come from when read:
    a worker reads them from its store. Without a source they report nothing."""
    global _gauge_source
    _gauge_source = source


def read_gauges() -> Mapping[str, GaugeValue]:
    """The gauges' values now; empty without a source or when the source fails."""
    source = _gauge_source
    if source is None:
        return {}
    try:
        return source()
    except Exception:
        # A scrape must not fail (nor log a URL) because the store did not answer.
        return {}


def _observe(metric: Metric) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(_: CallbackOptions) -> Iterable[Observation]:
        value = read_gauges().get(metric.name)
        if value is None:
            return []
        if isinstance(value, Mapping):
            return [Observation(v, {"tool": tool}) for tool, v in value.items()]
        return [Observation(value)]

    return observe


#: False: nothing is recorded (``configure``).
_on = True
_counters: dict[str, Counter] = {}
_histograms: dict[str, Histogram] = {}
_gauges: list[ObservableGauge] = []


def configure(enabled: bool, provider: metrics.MeterProvider | None) -> None:
    """Metrics on or off, into ``provider`` or (``None``) the global meter provider."""
    global _on
    _on = enabled
    meter = metrics.get_meter(SCOPE) if provider is None else provider.get_meter(SCOPE)
    _counters.clear()
    _histograms.clear()
    _gauges.clear()
    for m in METRICS.values():
        if m.kind == "counter":
            _counters[m.name] = meter.create_counter(m.name, unit=m.unit, description=m.description)
        elif m.kind == "histogram":
            _histograms[m.name] = meter.create_histogram(
                m.name,
                unit=m.unit,
                description=m.description,
                explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS),
            )
        else:
            _gauges.append(
                meter.create_observable_gauge(
                    m.name, callbacks=[_observe(m)], unit=m.unit, description=m.description
                )
            )


configure(True, None)
_sinks: list[MetricSink] = []


def add_sink(sink: MetricSink) -> None:
    """Sends every counter and histogram value to ``sink`` too (in this process)."""
    _sinks.append(sink)


def record(metric: Metric, value: float, **labels: str) -> None:
    """Adds to a counter or records into a histogram; labels must be ``metric.labels``."""
    if not _on:
        return
    if metric.kind == "counter":
        _counters[metric.name].add(value, labels)
    else:
        _histograms[metric.name].record(value, labels)
    for sink in _sinks:
        sink.record(metric, value, labels)


def reaped(*, sealed: int, reprojected: int) -> None:
    """One reaper pass: calls it sealed WORKER_LOST and project steps it sent again."""
    if sealed:
        record(REAPER_SEALS, sealed)
    if reprojected:
        record(REAPER_REPROJECTIONS, reprojected)


def stale_holder(tool: str) -> None:
    """An attempt of ``tool`` was refused a step because another attempt has its call now."""
    record(STALE_HOLDERS, 1, tool=tool)


def slot_waited(tool: str, seconds: float) -> None:
    """A limited tool's call was handed a slot after waiting ``seconds`` in line."""
    record(SLOT_WAIT, seconds, tool=tool)
