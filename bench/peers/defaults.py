"""Celery with its default settings: the same two no-op steps as ``bench.peers.bare``, but the app
sets nothing beyond where the broker and the result backend are (and its queue names).

So no late acks, a prefetch multiplier of 4, no task events, no task-sent events, no
started state, results kept a day. Reported beside the fair peer so a reader sees what our
reliability settings (late acks, prefetch 1, events for Flower) cost Celery itself.
Workers run ``celery -A bench.peers.defaults worker``.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from bench.peers.bare import outcome_shape, queue_config
from tasks.settings import Settings

#: The defaults worker's queues, in the roles of ours ("tools", "projections").
TOOLS_QUEUE = "defaults_tools"
PROJECTIONS_QUEUE = "defaults_projections"
QUEUES = (TOOLS_QUEUE, PROJECTIONS_QUEUE)

EXECUTE = "bench_defaults.execute"
PROJECT = "bench_defaults.project"


def defaults_config(settings: Settings) -> dict[str, Any]:
    """Broker, backend and queue names; everything else is Celery's default."""
    return {
        "broker_url": settings.broker,
        "result_backend": settings.backend,
        **queue_config((EXECUTE, PROJECT), QUEUES),
        # Not a behaviour: only silences the start-up deprecation warning in the worker log.
        "broker_connection_retry_on_startup": True,
    }


def create_defaults_app(settings: Settings) -> Celery:
    created = Celery("bench_defaults")
    created.config_from_object(defaults_config(settings))
    return created


#: The app defaults workers run, configured from ``TOOL_BOUNDARY_*`` like ours.
app = create_defaults_app(Settings())


@app.task(name=EXECUTE)
def execute(run_id: str, tool_call_id: str) -> str:
    return "STORED"


@app.task(name=PROJECT)
def project(run_id: str, tool_call_id: str) -> dict[str, Any]:
    return outcome_shape(tool_call_id)
