"""The Celery app (``celery -A tasks worker -Q tools,projections``), configured from
``TOOL_BOUNDARY_*`` settings. JSON only; results are bounded outcomes, never arguments."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue

from boundary import ToolRegistry
from tasks.runtime import configure_runtime, get_settings
from tasks.settings import Settings
from tasks.wiring.redis_access import backend_use_ssl, broker_use_ssl
from tasks.wiring.results import BoundaryCelery, register_settings
from tasks.wiring.sentinel import celery_url
from tasks.wiring.transport_names import broker_transport_name

#: Queue of the execute step (runs tools).
TOOLS_QUEUE = "tools"
#: Queue of the project step, run projections and the reaper.
PROJECTIONS_QUEUE = "projections"
#: Queue of long-running tools (``ToolSpec(queue="long")``), with workers of their own.
LONG_QUEUE = "long"
#: Queue of re-projection jobs' chunks (``tool-boundary reproject --projectors current``), so
#: a job never waits in line with, nor holds back, live calls' project steps.
REPROJECTIONS_QUEUE = "reprojections"

EXECUTE = "tool_boundary.execute"
PROJECT = "tool_boundary.project"
PROJECT_RUN = "tool_boundary.project_run"
PROJECT_RUNS = "tool_boundary.project_runs"
REAP = "tool_boundary.reap"
REPROJECT_CHUNK = "tool_boundary.reproject_chunk"
#: Hands a limited tool's free slots to its line when the rate limit allows (scheduled).
FLOW_WAKE = "tool_boundary.flow_wake"


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings derived from ours."""
    transport: dict[str, Any] = {"visibility_timeout": settings.visibility_timeout_s}
    if settings.restore_sweep_s is not None:
        transport |= {
            "unacked_restore_interval": settings.restore_sweep_s,
            "unacked_restore_throttle": 1,
        }
    broker_url, broker_options = celery_url(settings.broker)
    backend_url, backend_options = celery_url(settings.backend)
    transport |= broker_options
    return {
        "broker_url": broker_url,
        # (the URL's TLS options again, for Flower's Broker API, which reads only this)
        **broker_use_ssl(settings.broker),
        "result_backend": backend_url,
        # (a TLS redis+sentinel:// backend's options, for the master it names)
        **backend_use_ssl(settings.backend),
        "result_backend_transport_options": backend_options,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        # Results live as long as the records they came from.
        "result_expires": math.ceil(settings.ttl_s),
        # Extended results would store each task's real arguments in the backend.
        "result_extended": False,
        "task_queues": tuple(
            Queue(name, Exchange(name, type="direct"), routing_key=name)
            # Declared, so monitors (Flower's Broker page) list each queue, also one whose
            # workers are down; a worker still consumes the queues its -Q names.
            for name in (TOOLS_QUEUE, LONG_QUEUE, PROJECTIONS_QUEUE, REPROJECTIONS_QUEUE)
        ),
        "task_default_queue": TOOLS_QUEUE,
        "task_routes": {
            EXECUTE: {"queue": TOOLS_QUEUE, "routing_key": TOOLS_QUEUE},
            PROJECT: {"queue": PROJECTIONS_QUEUE, "routing_key": PROJECTIONS_QUEUE},
            PROJECT_RUN: {"queue": PROJECTIONS_QUEUE, "routing_key": PROJECTIONS_QUEUE},
            PROJECT_RUNS: {"queue": PROJECTIONS_QUEUE, "routing_key": PROJECTIONS_QUEUE},
            REAP: {"queue": PROJECTIONS_QUEUE, "routing_key": PROJECTIONS_QUEUE},
            FLOW_WAKE: {"queue": PROJECTIONS_QUEUE, "routing_key": PROJECTIONS_QUEUE},
            REPROJECT_CHUNK: {"queue": REPROJECTIONS_QUEUE, "routing_key": REPROJECTIONS_QUEUE},
        },
        "task_acks_late": True,
        "worker_prefetch_multiplier": 1,
        "task_track_started": True,
        # Flower sees every task, by name and id; argsrepr shows ids only.
        "worker_send_task_events": True,
        # On by default (Flower's SENT state); a documented setting turns it off.
        "task_send_sent_event": settings.task_sent_events,
        "task_time_limit": settings.task_time_limit_s,
        "broker_transport_options": transport,
        # A Redis broker's acks through tasks.wiring.broker_transport (a full Redis cannot stop a
        # worker), named so that the URLs kombu and Flower print keep their redis:// scheme.
        "broker_transport": broker_transport_name(settings.broker),
        "broker_connection_retry_on_startup": True,
        # A broker that refuses a command (full: OutOfMemoryError; a demoted Sentinel master:
        # ReadOnlyError) is retried like a lost connection instead of stopping the worker: a
        # worker that started while its broker was full exited at once (the chaos run).
        "broker_channel_error_retry": True,
        "broker_connection_timeout": settings.publish_timeout_s,
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
        # A worker process that dies under a tool sends its execute task again, at most
        # this many times (Celery applies annotations when it binds the task).
        "task_annotations": {
            EXECUTE: {"max_retries": settings.worker_lost_max_retries},
            # The reaper's runs send no event unless asked (``BoundaryCelery.send_task`` leaves
            # out their task-sent event too): they would fill Flower's task list.
            REAP: {"send_events": settings.reap_events},
        },
        "beat_schedule": {
            "reap-stuck-calls": {"task": REAP, "schedule": settings.reap_interval_s},
        },
        "timezone": "UTC",
        "enable_utc": True,
    }


def create_app(settings: Settings, name: str = "tool_boundary") -> Celery:
    """A Celery app configured from ``settings``. Tasks are sent by name, so an app made
    here can dispatch calls (e.g. to another broker) without importing the task module."""
    created = BoundaryCelery(name)
    created.config_from_object(celery_config(settings))
    register_settings(created, settings)
    return created


class _SettingsConfig(Mapping[str, Any]):
    """The Celery configuration of the process's settings, read when Celery first needs it.

    Not at import: ``import tasks`` must not fail on a bad ``TOOL_BOUNDARY_*`` value, so the
    CLI can report it as one line (exit 2) and a program can call ``configure()`` first.
    """

    def __init__(self) -> None:
        self._config: dict[str, Any] | None = None

    def _loaded(self) -> dict[str, Any]:
        if self._config is None:
            self._config = celery_config(get_settings())
        return self._config

    def __getitem__(self, name: str) -> Any:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())


#: The app workers run (``celery -A tasks worker``).
app = BoundaryCelery("tool_boundary")
app.config_from_object(_SettingsConfig())


def configure(settings: Settings, registry: ToolRegistry | None = None) -> Celery:
    """Points the app (and the tasks' store and registry) at new settings.

    Call before the first message is sent or a worker starts.
    """
    configure_runtime(settings, registry)
    app.conf.update(celery_config(settings))
    return app
