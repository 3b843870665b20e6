"""The worker's Prometheus endpoint: ``/metrics`` on ``TOOL_BOUNDARY_METRICS_HOST``
(127.0.0.1) : ``TOOL_BOUNDARY_METRICS_PORT`` when that is set (off by default).

Under the prefork pool the figures are made in the pool's child processes, and a child may be
replaced at any time. prometheus-client's multiprocess mode is the known path for that: every
process of the worker writes its counters and histograms to its own files in one directory
(``PROMETHEUS_MULTIPROC_DIR``, a fresh temporary directory unless set, emptied at start), and
the parent process serves ``/metrics`` summing every file, those of children that have exited
included, so counts never go back. The same code serves a threads or solo worker (one
process, the same files). Gauges (calls PROJECTING, heartbeat lag, each limited tool's cap,
calls holding a slot and waiting, the fleet's reserved entry of re-projection chunks
``tool_boundary.reproject`` included) are read from the store by the parent when scraped.
Needs the ``[otel]`` extra (``prometheus-client``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from boundary import RedisCanonicalStore, telemetry
from boundary.flow import Flow
from boundary.telemetry import Metric

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class PrometheusSink:
    """Records telemetry's counters and histograms as prometheus-client metrics (in
    multiprocess mode: to this process's files)."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self._metrics: dict[str, Any] = {}
        for metric in telemetry.METRICS.values():
            if metric.kind == "counter":
                self._metrics[metric.name] = Counter(
                    metric.prometheus.removesuffix("_total"),
                    metric.description,
                    labelnames=metric.labels,
                    registry=None,
                )
            elif metric.kind == "histogram":
                self._metrics[metric.name] = Histogram(
                    metric.prometheus,
                    metric.description,
                    labelnames=metric.labels,
                    buckets=telemetry.SECONDS_BUCKETS,
                    registry=None,
                )

    def record(self, metric: Metric, value: float, labels: Mapping[str, str]) -> None:
        instrument = self._metrics[metric.name]
        if labels:
            instrument = instrument.labels(**labels)
        if metric.kind == "counter":
            instrument.inc(value)
        else:
            instrument.observe(value)


class StoreGauges:
    """The gauges, read when scraped (``telemetry.read_gauges``)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        values = telemetry.read_gauges()
        for metric in telemetry.METRICS.values():
            if metric.kind != "gauge" or metric.name not in values:
                continue
            value = values[metric.name]
            if isinstance(value, Mapping):
                family = GaugeMetricFamily(
                    metric.prometheus, metric.description, labels=list(metric.labels)
                )
                for tool, n in value.items():
                    family.add_metric([tool], n)
                yield family
            else:
                yield GaugeMetricFamily(metric.prometheus, metric.description, value=value)


def store_gauges(store: RedisCanonicalStore, flow: Flow) -> dict[str, telemetry.GaugeValue]:
    """The gauges' values now, read from the store: calls PROJECTING, the heartbeat lag, and
    each limited tool's cap in force (when it has one), calls holding a slot and waiting
    (from its own keys, never a scan); ``flow``'s reserved entries are limited tools here
    (``metrics_flow``: the re-projection chunks' cap, its lanes holding and waiting)."""
    values: dict[str, telemetry.GaugeValue] = {
        telemetry.PROJECTING.name: float(store.count_projecting() or 0)
    }
    lag = store.heartbeat_lag_s()
    # No call running: no lag to report (not a lag of 0).
    if lag is not None:
        values[telemetry.HEARTBEAT_LAG.name] = lag
    statuses = [flow.status(tool) for tool in flow.limited_tools()]
    if statuses:
        values[telemetry.CALLS_RUNNING.name] = {s.tool: float(s.running) for s in statuses}
        values[telemetry.CALLS_WAITING.name] = {s.tool: float(s.waiting) for s in statuses}
        capped = [s for s in statuses if s.limits.concurrency is not None]
        if capped:
            values[telemetry.CALLS_LIMIT.name] = {
                s.tool: float(s.limits.concurrency or 0) for s in capped
            }
    return values


def metrics_flow(runtime: Any) -> Flow:
    """The flow control the gauges read: the runtime's registry and the fleet's reserved
    entry of re-projection chunks (its cap from ``TOOL_BOUNDARY_REPROJECT_CONCURRENCY``,
    overlaid by ``limits set``), so it is exported as a limited tool is."""
    from tasks.worker.chunk_slots import reserve

    flow = Flow(runtime.store, runtime.registry, None)
    reserve(flow, runtime.settings)
    return flow


def _multiprocess_dir() -> tuple[Path, bool]:
    """The directory of every process's files, emptied; ``True`` when made here."""
    named = os.environ.get(MULTIPROC_ENV)
    if named:
        path = Path(named)
        path.mkdir(parents=True, exist_ok=True)
        # Files of an earlier worker would be summed in: figures start at zero.
        for stale in path.glob("*.db"):
            stale.unlink()
        return path, False
    path = Path(tempfile.mkdtemp(prefix="tool-boundary-metrics-"))
    os.environ[MULTIPROC_ENV] = str(path)
    return path, True


class MetricsEndpoint:
    """The running endpoint: ``stop()`` ends it."""

    def __init__(self, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry, start_http_server, values
        from prometheus_client.multiprocess import MultiProcessCollector

        self.directory, self._made = _multiprocess_dir()
        # Metrics made from now on write to files, even if prometheus_client was imported
        # before the variable was set (it reads it once, at import).
        values.ValueClass = values.get_value_class()
        telemetry.add_sink(PrometheusSink())
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self.directory))
        registry.register(StoreGauges())
        self.server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.address = (host, self.server.server_port)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._made:
            shutil.rmtree(self.directory, ignore_errors=True)


_endpoint: MetricsEndpoint | None = None


def serve_metrics(**_: Any) -> None:
    """``worker_init``: starts the endpoint in the worker's main process, before the pool
    starts (its children inherit the sink), and lets the gauges read the store."""
    global _endpoint
    from tasks.runtime import get_runtime

    try:
        runtime = get_runtime()
    except Exception:
        # Bad settings: ``tasks.worker.startup.check_runtime`` stops the worker with one line; a
        # traceback from here would only repeat it (or carry a URL).
        return
    flow = metrics_flow(runtime)

    def gauges() -> dict[str, telemetry.GaugeValue]:
        return store_gauges(runtime.store, flow)

    telemetry.set_gauge_source(gauges)
    port = runtime.settings.metrics_port
    if port is None:
        return
    host = runtime.settings.metrics_host
    try:
        _endpoint = MetricsEndpoint(host, port)
    except ImportError:
        logger.warning("metrics endpoint not started: install tool-boundary[otel]")
        return
    except OSError as exc:
        # Metrics are not worth stopping a worker for; the operator sees this line.
        logger.warning("metrics endpoint not started on %s:%d: %s", host, port, exc.strerror)
        return
    logger.info("tool-boundary worker: /metrics on %s:%d", *_endpoint.address)


def stop_metrics(**_: Any) -> None:
    """``worker_shutdown``: stops the endpoint."""
    global _endpoint
    if _endpoint is not None:
        _endpoint.stop()
        _endpoint = None
