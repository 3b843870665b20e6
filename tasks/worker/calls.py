"""The tasks of a call, by their old module: execute (``tasks.worker.execute``), project
(``tasks.worker.project``), reap and flow wake-up (``tasks.worker.upkeep``); the process's own
objects are in ``tasks.worker.process`` and its one sender of project steps in
``tasks.worker.project_sender``. The run projection tasks are in ``tasks.worker.runs``, and
every worker hook is connected in ``tasks.worker.signals``."""

from __future__ import annotations

from tasks.worker.execute import execute_tool, seal_when_retries_run_out
from tasks.worker.process import (
    attempt_sender,
    attempt_terms,
    progress_events,
    project_sender,
    worker_runtime,
)
from tasks.worker.project import project_result
from tasks.worker.upkeep import reap_stuck_calls, wake_flow

__all__ = [
    "attempt_sender",
    "attempt_terms",
    "execute_tool",
    "progress_events",
    "project_result",
    "project_sender",
    "reap_stuck_calls",
    "seal_when_retries_run_out",
    "send_projection",
    "wake_flow",
    "worker_runtime",
]

#: Sends a call's project step (again): the process's one sender's.
send_projection = project_sender.send_projection
