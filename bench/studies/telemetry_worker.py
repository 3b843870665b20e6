"""Our worker with its call telemetry set by ``BENCH_TELEMETRY``: ``off`` (no span, no header,
no figure), ``noop`` (the default: the OpenTelemetry API without an SDK) or ``sdk`` (the SDK
exporting to nothing, ``bench.studies.otel_sdk``). Workers run ``celery -A
bench.studies.telemetry_worker worker -P threads``: the providers are made at import, which a
prefork pool would fork."""

from __future__ import annotations

import os

from bench.studies.otel_sdk import sdk_providers
from boundary import telemetry
from tasks import app

__all__ = ["app"]

MODE = os.environ.get("BENCH_TELEMETRY", "noop")
if MODE == "off":
    telemetry.configure(enabled=False)
elif MODE == "sdk":
    tracer_provider, meter_provider = sdk_providers()
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
