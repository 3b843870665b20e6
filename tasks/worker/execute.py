"""The execute task of a call: a thin wrapper over the core's execute step
(``boundary.steps.execute``) and what follows it (``boundary.steps.plan``: the project step run
in line when the worker does that, and the one decision about the call's project step, carried
out by the process's one sender of project steps, ``tasks.worker.project_sender``). No traceback
or exception text reaches the result backend, Flower or the log (it would be a leak)."""

from __future__ import annotations

import logging
from typing import Any

from billiard.exceptions import WorkerLostError
from celery.exceptions import SoftTimeLimitExceeded

from boundary import ErrorCode, StoreError, telemetry
from boundary.call_steps import key_of
from boundary.formats import FormatTooNew
from boundary.steps.attempts import refuse_newer_message, seal_too_new
from boundary.steps.execute import execute_step
from boundary.steps.plan import Attempted, InLine, ProjectPlan, after_execute
from tasks.wiring.app import EXECUTE, app
from tasks.wiring.failures import CodeOnlyFailures, ToolCallFailed
from tasks.worker.process import (
    attempt_terms,
    progress_events,
    project_sender,
    worker_runtime,
)
from tasks.worker.step_store import retrying, step_store

__all__ = ["execute_tool", "seal_when_retries_run_out"]

logger = logging.getLogger(__name__)

#: How an execute task ends when it could not run its step: its project step goes as chained
#: (it retries the store, or answers RECORD_NOT_FOUND).
_INVALID_KEY = Attempted(ProjectPlan.PROJECT, "INVALID_KEY")
_FAILED = Attempted(ProjectPlan.PROJECT, "FAILED")


@app.task(
    name=EXECUTE,
    bind=True,
    acks_late=True,
    # A killed worker process sends the task again, at most ``worker_lost_max_retries`` times
    # (a task annotation of the app's config); the step is idempotent, so a retry never runs a
    # tool whose raw response is already kept.
    retry_on_worker_lost=True,
    default_retry_delay=0,
    # Nothing of this step is worth storing, and a stored failure would carry a traceback.
    ignore_result=True,
    # An attempt that ends without its call (cancelled under it, or taken over by another
    # attempt) fails with the code only (``boundary.steps.plan.attempt_failed``).
    base=CodeOnlyFailures,
)
def execute_tool(
    task: Any, run_id: str, tool_call_id: str, attempt: int = 1
) -> str | dict[str, Any]:
    """Runs attempt ``attempt`` of the call's tool and keeps its raw response in the record.

    The step ends with a plan for the call's project step, riding in this message's chain
    (``boundary.steps.plan.ProjectPlan``), which the process's one sender of project steps
    carries out: sent as chained (the message Celery's chain follow-up would send, for less
    work), sent to report only, or dropped; Celery's follow-up then has nothing left to send.

    With ``Settings.project_in_line`` (an opt-in, off by default) it then projects and seals
    the call too, keeping the raw response with the seal (one write), and returns its
    bounded outcome (what the ``task-succeeded`` event and Flower show, as the project task's
    would); otherwise (the default), or when the call did not end READY here, it returns the
    step's status name and the chained project task goes.

    When another attempt has the call (this message is stale, or this attempt handed the
    call to the next one), the chained project step is dropped: the current attempt's
    message carries its own, so the project task of a call runs once.
    """
    attempted = _execute(task.request, run_id, tool_call_id, attempt)
    project_sender.send(task.request, attempted.plan)
    if attempted.failed is None:
        return attempted.returned
    # Raised outside any except block: no other exception rides along as its context.
    raise ToolCallFailed(attempted.failed)


def _execute(request: Any, run_id: str, tool_call_id: str, attempt: int) -> Attempted:
    key = key_of(run_id, tool_call_id)
    if key is None:
        return _INVALID_KEY
    try:
        runtime = worker_runtime()
        refused = refuse_newer_message(runtime.store, request, key, attempt)
        if refused is not None:  # a newer version's message (boundary.formats): no project step
            return Attempted(ProjectPlan.SKIP, "FAILED", refused)
        settings = runtime.settings
        terms = attempt_terms()
        in_line = None
        if settings.project_in_line:
            in_line = InLine(
                runtime.registry,
                timeout_s=settings.projection_timeout_s,
                project_now=terms.project_now,
                carrier=request,
            )
        # Each store operation retried where it failed, never the whole step: a retry of the
        # step would run a tool that already ran (``tasks.worker.step_store``).
        retried = step_store(runtime.store, retrying)
        with (
            telemetry.worker_step(telemetry.EXECUTE, key, request),
            progress_events.running(key, request),
        ):
            executed = execute_step(
                retried,
                runtime.registry,
                key,
                attempt=attempt,
                terms=terms,
                timeout_errors=(SoftTimeLimitExceeded,),
                hold_raw=in_line is not None,
            )
        return after_execute(
            runtime.store, retried, key, executed, attempt=attempt, in_line=in_line
        )
    except FormatTooNew:  # a newer version's record (boundary.formats): logged there
        return Attempted(
            ProjectPlan.SKIP, "FAILED", seal_too_new(worker_runtime().store, key, attempt)
        )
    except Exception as exc:
        # Only the type: the text may hold a URL or a payload.
        logger.error("execute %s failed: %s", key.identity, type(exc).__name__)
        return _FAILED


def seal_when_retries_run_out(
    sender: Any = None,
    task_id: str | None = None,
    exception: BaseException | None = None,
    args: Any = None,
    **_: Any,
) -> None:
    """``task_failure`` of ``execute_tool``: the worker process died under the tool more often
    than allowed; end the call now rather than leave it to the reaper."""
    if not isinstance(exception, WorkerLostError) or not args or len(args) != 2:
        return
    key = key_of(*args)
    if key is None:
        return
    try:
        worker_runtime().store.seal_error(key, ErrorCode.WORKER_LOST)
    except StoreError:
        logger.error("could not seal %s WORKER_LOST; the reaper will", key.identity)
    logger.warning("call %s sealed WORKER_LOST after its retries ran out", key.identity)
