"""Celery wiring: the app, its tasks and the dispatcher (``celery -A tasks worker``)."""

import sys

from tasks.app import app, configure
from tasks.calls import execute_tool, project_result, reap_stuck_calls
from tasks.dispatcher import CeleryDispatcher
from tasks.runs import project_run as project_run
from tasks.runs import project_runs as project_runs
from tasks.runtime import exit_on_invalid_settings

if "celery.bin.celery" in sys.modules:
    # Loaded by the ``celery`` command (worker, beat, flower): a bad setting ends it here, as
    # one line and exit 2, rather than as a traceback inside Celery's app loader.
    exit_on_invalid_settings()

__all__ = [
    "CeleryDispatcher",
    "app",
    "configure",
    "execute_tool",
    "project_result",
    "reap_stuck_calls",
]
