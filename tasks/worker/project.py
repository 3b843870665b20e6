"""The project task of a call: a thin wrapper over the core's project step
(``boundary.steps.project``). Every task returns, except the project step of a call that ended
ERROR, which raises ``ToolCallFailed(<code>)`` on purpose so Flower's "Failed" filter lists it
(``tasks.wiring.failures``; ``docs/TASKS.md``); no traceback or exception text reaches the
result backend, Flower or the log."""

from __future__ import annotations

import logging
from typing import Any

from boundary import ErrorCode, ToolOutcome
from boundary.call_steps import key_of
from boundary.formats import FormatTooNew
from boundary.steps.attempts import refuse_newer_message, seal_too_new
from boundary.steps.project import project_or_report
from tasks.runtime import get_runtime
from tasks.wiring.app import PROJECT, app
from tasks.wiring.failures import CodeOnlyFailures, ToolCallFailed
from tasks.worker.process import project_sender, worker_runtime
from tasks.worker.step_store import retrying

__all__ = ["project_result"]

logger = logging.getLogger(__name__)


@app.task(
    name=PROJECT,
    acks_late=True,
    base=CodeOnlyFailures,
    # The sealed record is the only copy of the outcome: the app's backend answers this
    # task's AsyncResult from it (``tasks.wiring.results``). No STARTED write either.
    ignore_result=True,
)
def project_result(
    run_id: str, tool_call_id: str, attempt: int = 0, report: bool = False
) -> dict[str, Any]:
    """Projects the raw response, seals the record; returns the bounded outcome (what the
    ``task-succeeded`` event and Flower show; nothing stores it).

    An ERROR outcome ends the task in FAILURE with ``ToolCallFailed(<code>)`` and no
    traceback (see ``tasks.wiring.failures``), so monitoring lists it among the failed tasks.

    With ``report`` (sent by the watchdog for a call it sealed while its step still runs, or
    chained to an execute step that sealed the call ERROR in line) it only reports the sealed
    outcome and never seals: a record found PROJECTING is another call's under the same ids,
    or the call's next attempt, and is left alone.
    """
    projected = _project(run_id, tool_call_id, attempt, report)
    if projected is None:
        return {}  # a report with nothing to report
    if projected.error_code is not None:
        # Raised outside any except block: no other exception rides along as its context.
        raise ToolCallFailed(projected.error_code.value)
    return projected.model_dump(mode="json")


def _project(run_id: str, tool_call_id: str, attempt: int, report: bool) -> ToolOutcome | None:
    """The call's outcome once projected and sealed (or, with ``report``, as sealed); ``None``
    when a report has nothing to report (the store failed, or the record is not this seal's).
    A store that failed under the project step (its retries spent) gives STORE_UNAVAILABLE,
    and the step is sent again after a delay."""
    key = key_of(run_id, tool_call_id)
    if key is None:
        return ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
    try:
        runtime = worker_runtime()
        if not report:
            refused = refuse_newer_message(runtime.store, project_result.request, key, None)
            if refused is not None:  # a newer version's message (boundary.formats)
                return ToolOutcome.error(key.tool_call_id, ErrorCode(refused))
        return project_or_report(
            runtime.store,
            runtime.registry,
            key,
            report=report,
            retry=retrying,
            timeout_s=runtime.settings.projection_timeout_s,
            project_now=project_sender.send_early,
            carrier=project_result.request,
        )
    except FormatTooNew:  # a newer version's record (boundary.formats): logged there
        if report:
            return None
        return ToolOutcome.error(
            key.tool_call_id, ErrorCode(seal_too_new(worker_runtime().store, key, None))
        )
    except Exception as exc:
        logger.error("project %s failed: %s", key.identity, type(exc).__name__)
        if report:
            return None
        project_sender.resend(key, attempt, resends=get_runtime().settings.project_resends)
        return ToolOutcome.error(key.tool_call_id, ErrorCode.STORE_UNAVAILABLE)
