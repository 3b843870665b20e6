"""Celery wiring: the app, its tasks and the dispatcher (``celery -A tasks worker``)."""

from tasks.app import app, configure
from tasks.calls import execute_tool, project_result, reap_stuck_calls
from tasks.dispatcher import CeleryDispatcher
from tasks.runs import project_run as project_run

__all__ = [
    "CeleryDispatcher",
    "app",
    "configure",
    "execute_tool",
    "project_result",
    "reap_stuck_calls",
]
