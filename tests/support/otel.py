"""The OpenTelemetry SDK for the telemetry tests: one tracer provider and one meter provider
per process (the API's globals can be set only once), exporting to memory or to a file."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from boundary import telemetry

SPANS = InMemorySpanExporter()
METRICS = InMemoryMetricReader()
_installed = False


def install() -> None:
    """Makes this process's spans go to ``SPANS`` and its metrics to ``METRICS``."""
    global _installed
    if _installed:
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SPANS))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[METRICS]))
    # At once, not at the telemetry's next look at the global providers.
    telemetry.configure()
    _installed = True


class FileSpanExporter(SpanExporter):
    """Appends each span as one JSON line (what a worker subprocess leaves for the test)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(span.to_json(indent=None) + "\n")
        return SpanExportResult.SUCCESS


def install_file_exporter() -> None:
    """In a worker subprocess: spans to the file ``TB_TEST_SPAN_FILE`` names, if it does."""
    path = os.environ.get("TB_TEST_SPAN_FILE")
    if not path:
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    trace.set_tracer_provider(provider)
    telemetry.configure()


def read_span_file(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def points(name: str) -> dict[frozenset[tuple[str, Any]], Any]:
    """The data points of one metric as ``METRICS`` holds them now, by attributes."""
    data = METRICS.get_metrics_data()
    found: dict[frozenset[tuple[str, Any]], Any] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found[frozenset((point.attributes or {}).items())] = point
    return found


def count(name: str, **labels: str) -> float:
    """A counter's value, or a histogram's count, for ``labels`` (0 when never recorded)."""
    point = points(name).get(frozenset(labels.items()))
    if point is None:
        return 0
    return float(point.value if hasattr(point, "value") else point.count)
