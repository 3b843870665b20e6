"""The two steps of a call after its record exists, as plain functions.

``execute_step`` (``boundary.steps.execute``) runs the tool and keeps its raw response;
``project_step`` (``boundary.steps.project``) projects it and seals the record. A worker that
projects in line (``Settings.project_in_line``) runs the execute step with ``hold_raw=True``
and hands the response it held to ``project_held``, which keeps it with the seal: one write
fewer. How an attempt ends and how a call moves on to its next attempt (``next_attempt``, the
worker's and the reaper's one way) are in ``boundary.steps.attempts``; what follows an execute
step (the project step in line, and the one plan for the call's project step:
``ProjectPlan``) in ``boundary.steps.plan``. Celery tasks (and the
in-process dispatcher) are thin wrappers around them. Neither lets a tool's or projector's
exception out: each becomes a stable code on the record. Store errors do propagate
(``StoreError``): the caller decides whether to retry.
"""

from __future__ import annotations

from boundary.models import ToolOutcome
from boundary.record_size import record_fits, record_size
from boundary.steps.attempts import (
    AttemptSender,
    AttemptTerms,
    ExecuteResult,
    next_attempt,
    send_attempt,
)
from boundary.steps.execute import HeldRaw, execute_step, keep_held
from boundary.steps.plan import Attempted, ProjectPlan, after_execute
from boundary.steps.project import (
    DEFAULT_PROJECTION_TIMEOUT_S,
    project_held,
    project_or_report,
    project_raw,
    project_step,
    report_step,
)
from boundary.tool_threads import DEFAULT_MAX_TOOL_THREADS, limit_tool_threads

#: The old name of ``ToolOutcome.from_record`` here (the steps no longer import the caller's
#: module for it).
outcome_from_record = ToolOutcome.from_record

__all__ = [
    "DEFAULT_MAX_TOOL_THREADS",
    "DEFAULT_PROJECTION_TIMEOUT_S",
    "AttemptSender",
    "AttemptTerms",
    "Attempted",
    "ExecuteResult",
    "HeldRaw",
    "ProjectPlan",
    "after_execute",
    "execute_step",
    "keep_held",
    "limit_tool_threads",
    "next_attempt",
    "outcome_from_record",
    "project_held",
    "project_or_report",
    "project_raw",
    "project_step",
    "record_fits",
    "record_size",
    "report_step",
    "send_attempt",
]
