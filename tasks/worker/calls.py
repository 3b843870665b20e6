"""The tasks of a call (execute, project, reap, flow wake-up): thin wrappers over the core's steps
(``boundary.steps``, ``boundary.reaper``); the run projection tasks are in
``tasks.worker.runs``, and every worker hook is connected in ``tasks.worker.signals``. No
traceback or exception text reaches the result backend, Flower or the log (it would be a leak):
every task returns, except the project step of a call that ended ERROR, which raises
``ToolCallFailed(<code>)`` on purpose so Flower's "Failed" filter lists it
(``tasks.wiring.failures``; ``docs/TASKS.md``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from billiard.exceptions import WorkerLostError
from celery.exceptions import SoftTimeLimitExceeded

from boundary import CanonicalKey, ErrorCode, StoreError, ToolOutcome, handback, telemetry
from boundary.call_steps import key_of
from boundary.flow import Flow
from boundary.formats import FormatTooNew
from boundary.handback import HANDED_BACK
from boundary.reaper import Retries, reap_once
from boundary.steps import (
    AttemptTerms,
    ExecuteResult,
    HeldRaw,
    execute_step,
    keep_held,
    outcome_from_record,
    project_held,
    project_step,
)
from tasks.runtime import Runtime, get_runtime
from tasks.wiring.app import EXECUTE, FLOW_WAKE, PROJECT, PROJECTIONS_QUEUE, REAP, app
from tasks.wiring.dispatcher import CeleryDispatcher
from tasks.wiring.failures import CodeOnlyFailures, ToolCallFailed
from tasks.worker import chunk_slots, format_check
from tasks.worker.chained_project import ChainedProject
from tasks.worker.progress_events import ProgressEvents
from tasks.worker.step_store import STORE_RETRY_DELAY_S, retrying, step_store

logger = logging.getLogger(__name__)

_sender: CeleryDispatcher | None = None
#: Heartbeats of the calls this process runs, sent as ``task-progress`` events (Flower);
#: made the process's progress listener by ``tasks.worker.signals``.
progress_events = ProgressEvents(app)


def attempt_sender() -> CeleryDispatcher:
    """This process's sender of calls: retries, slots handed on, the execute tasks' project
    steps (made on first use, after the worker's config)."""
    global _sender
    if _sender is None:
        _sender = CeleryDispatcher(app)
    return _sender


#: Sends the project step chained to an execute message when the execute task returns, on
#: this process's sender of calls.
chained_project = ChainedProject(app, attempt_sender)


def worker_runtime() -> Runtime:
    """The process's runtime, its store's flow control installed (the calls it hands a slot
    are sent by this process's sender)."""
    runtime = get_runtime()
    flow = runtime.store.flow
    if flow is None:
        flow = Flow.install(runtime.store, runtime.registry, attempt_sender())
    elif isinstance(flow, Flow) and flow.sender is not attempt_sender():
        # Installed by a caller in this process first (a boundary made on the same store):
        # in a worker, the calls handed a slot go out through the worker's own sender.
        flow.sender = attempt_sender()
    if isinstance(flow, Flow):
        # The cap of re-projection chunks: its slots, its line and its sweep.
        chunk_slots.reserve(flow, runtime.settings)
    return runtime


#: The terms last made, kept while the sender and the settings they come from are the same.
_terms: AttemptTerms | None = None


def attempt_terms() -> AttemptTerms:
    """How this process's execute steps run an attempt (``AttemptTerms``, frozen): made once,
    again only when the sender or one of the settings it carries changed."""
    global _terms
    settings = get_runtime().settings
    sender = attempt_sender()
    terms = _terms
    if (
        terms is None
        or terms.sender is not sender
        or terms.max_pending_s != settings.max_pending_s
        or terms.reap_grace_s != settings.reap_grace_s
        or terms.heartbeat_interval_s != settings.heartbeat_interval_s
    ):
        terms = _terms = AttemptTerms(
            sender=sender,
            max_pending_s=settings.max_pending_s,
            reap_grace_s=settings.reap_grace_s,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            project_now=_project_now,
        )
    return terms


def _project_now(key: CanonicalKey) -> None:
    """The watchdog sealed a call whose step still runs in line: its project step goes out
    now (under its usual task id), so its waiters and Flower see the end on time. It only
    reports the seal: it may run after the record is gone and its ids taken again."""
    send_projection(key, report=True)


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
    # attempt) fails with the code only (``_attempt_failed``).
    base=CodeOnlyFailures,
)
def execute_tool(
    task: Any, run_id: str, tool_call_id: str, attempt: int = 1
) -> str | dict[str, Any]:
    """Runs attempt ``attempt`` of the call's tool and keeps its raw response in the record.

    The project step still riding in the message's chain when the step returns is sent from
    here (``chained_project``: the message Celery's chain follow-up sends, for less work),
    and Celery's follow-up then has nothing left to send.

    With ``Settings.project_in_line`` (an opt-in, off by default) it then projects and seals
    the call too, keeping the raw response with the seal (one write), and returns its
    bounded outcome (what the ``task-succeeded`` event and
    Flower show, as the project task's would); otherwise (the default), or when the call did
    not end READY here, it returns the step's status name and the chained project task goes.

    When another attempt has the call (this message is stale, or this attempt handed the
    call to the next one), the chained project step is dropped: the current attempt's
    message carries its own, so the project task of a call runs once.
    """
    refused = format_check.refused_message(task.request, run_id, tool_call_id, attempt)
    if refused is not None:  # a newer version's message (boundary.formats)
        task.request.chain = None
        raise ToolCallFailed(refused)
    returned = _execute(task, run_id, tool_call_id, attempt)
    # Only on a normal return, as Celery's follow-up (a failed task sends no chain).
    chained_project.send(task.request)
    return returned


def _execute(task: Any, run_id: str, tool_call_id: str, attempt: int) -> str | dict[str, Any]:
    key = key_of(run_id, tool_call_id)
    if key is None:
        return "INVALID_KEY"
    failed: str | None = None
    try:
        runtime = worker_runtime()
        terms = attempt_terms()
        in_line = runtime.settings.project_in_line
        with (
            telemetry.worker_step(telemetry.EXECUTE, key, task.request),
            progress_events.running(key, task.request),
        ):
            # Each store operation retried where it failed, never the whole step: a retry of
            # the step would run a tool that already ran (``tasks.worker.step_store``).
            executed = execute_step(
                step_store(runtime.store, retrying),
                runtime.registry,
                key,
                attempt=attempt,
                terms=terms,
                timeout_errors=(SoftTimeLimitExceeded,),
                hold_raw=in_line,
            )
        projected = None
        if isinstance(executed, HeldRaw):
            executed, projected = _held_in_line(runtime, executed, task.request)
        elif executed is ExecuteResult.STORED and in_line:
            # Kept by an earlier attempt: projected from the store.
            projected = _projected_in_line(runtime, key, task.request)
        if executed is ExecuteResult.HANDED_ON or (
            projected is not None and projected.error_code is None
        ):
            # Another attempt's message carries the project step, or it ran here.
            task.request.chain = None
            if projected is not None:
                return projected.model_dump(mode="json")
        elif projected is not None and projected.error_code is not ErrorCode.STORE_UNAVAILABLE:
            # Sealed ERROR: the chained project task only reports it (Flower's failed task),
            # without projecting again (no second project span or duration sample). A store
            # that could not say leaves it a whole project step.
            _chained_project_reports(task.request)
        failed = _attempt_failed(runtime, key, attempt, executed)
        if failed is None:
            return executed.value
        if failed == ErrorCode.CANCELLED.value:
            task.request.chain = None  # this task reports it (the cancel revoked the other)
    except FormatTooNew:  # a newer version's record (boundary.formats): logged there
        task.request.chain = None
        failed = format_check.seal_too_new(key, attempt)
    except Exception as exc:
        # Only the type: the text may hold a URL or a payload.
        logger.error("execute %s failed: %s", key.identity, type(exc).__name__)
        return "FAILED"
    # Raised outside any except block: no other exception rides along as its context.
    raise ToolCallFailed(failed)


#: The code of an execute task whose attempt another attempt took over (its worker was
#: judged lost, or it timed out and was retried): not an ``ErrorCode``, the call goes on.
SUPERSEDED = "SUPERSEDED"


def _attempt_failed(
    runtime: Runtime, key: CanonicalKey, attempt: int, executed: ExecuteResult
) -> str | None:
    """The code this execute task fails with (Flower's "Failed"), or ``None``: it succeeds.

    - ``CANCELLED``: the call was cancelled while this attempt ran (the cancel revoked the
      project task, so no other task reports it);
    - ``SUPERSEDED``: another attempt has the call (this one was lost, or handed it on).

    Any other seal is reported by the call's project task. One read, only after a step that
    did not keep a raw response; a store that cannot say lets the task succeed as before.
    """
    if executed not in (ExecuteResult.SEALED, ExecuteResult.HANDED_ON):
        return None
    try:
        record = runtime.store.get(key, with_raw=False)
    except StoreError:
        return None
    if record is None:
        return None
    if executed is ExecuteResult.SEALED and record.error_code is ErrorCode.CANCELLED:
        return ErrorCode.CANCELLED.value
    if executed is ExecuteResult.HANDED_ON and record.attempt > attempt:
        # A draining worker's hand-back is shown as such (boundary.handback).
        return HANDED_BACK if handback.handed_back(key, attempt) else SUPERSEDED
    return None


def _projected_in_line(runtime: Runtime, key: CanonicalKey, request: Any) -> ToolOutcome | None:
    """Projects and seals the call on this task's thread (``Settings.project_in_line``) and
    returns its outcome: READY, its chained project task need not go; ERROR, it goes to report
    the seal. A failure here (the store's) gives None: the chained project task projects
    again, and retries the store."""
    ended = _in_line(
        key,
        request,
        lambda: project_step(
            runtime.store,
            runtime.registry,
            key,
            timeout_s=runtime.settings.projection_timeout_s,
            project_now=_project_now,
        ),
    )
    return ended if isinstance(ended, ToolOutcome) else None


def _held_in_line(
    runtime: Runtime, held: HeldRaw, request: Any
) -> tuple[ExecuteResult, ToolOutcome | None]:
    """Projects the raw response the execute step held and seals the call with it, on this
    task's thread (``Settings.project_in_line``): how the execute step ended, and the outcome
    when sealed here. A failure here (the store's) keeps the response alone (retried) and
    gives no outcome: the chained project task projects it, as after ``_projected_in_line``."""
    ended = _in_line(
        held.record.key,
        request,
        lambda: project_held(
            runtime.store,
            runtime.registry,
            held,
            timeout_s=runtime.settings.projection_timeout_s,
            project_now=_project_now,
        ),
    )
    if ended is None:
        return retrying(lambda: keep_held(runtime.store, held)), None
    if isinstance(ended, ExecuteResult):
        return ended, None
    return ExecuteResult.STORED, ended


def _in_line(
    key: CanonicalKey, request: Any, project: Callable[[], ToolOutcome | ExecuteResult]
) -> ToolOutcome | ExecuteResult | None:
    """Runs a project step on this task's thread as the call's project span; ``None`` when it
    failed (the store's failure: logged by its type only)."""
    try:
        with telemetry.worker_step(telemetry.PROJECT, key, request) as step:
            ended = project()
            if isinstance(ended, ToolOutcome):
                step.outcome(ended)
    except Exception as exc:
        logger.error("project %s in line failed: %s", key.identity, type(exc).__name__)
        return None
    return ended


def _chained_project_reports(request: Any) -> None:
    """The project step chained to this execute message only reports the call's sealed
    outcome (``project_result(report=True)``)."""
    chain = request.chain
    if not chain:
        return
    step = chain[-1]
    kwargs = {**(step.get("kwargs") or {}), "report": True}
    step["kwargs"] = kwargs
    step.setdefault("options", {})["kwargsrepr"] = repr(kwargs)


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

    With ``report`` (sent by the watchdog for a call it sealed while its step still runs) it
    only reports the sealed outcome and never seals: a record found PROJECTING is another
    call's under the same ids, or the call's next attempt, and is left alone.
    """
    key = key_of(run_id, tool_call_id)
    if key is None:
        raise ToolCallFailed(ErrorCode.RECORD_NOT_FOUND.value)
    if report:
        return _report_sealed(key)
    refused = format_check.refused_message(project_result.request, run_id, tool_call_id, None)
    if refused is not None:  # a newer version's message (boundary.formats)
        raise ToolCallFailed(refused)
    try:
        runtime = worker_runtime()
        timeout_s = runtime.settings.projection_timeout_s
        with telemetry.worker_step(telemetry.PROJECT, key, project_result.request) as step:
            outcome = retrying(
                lambda: project_step(
                    runtime.store,
                    runtime.registry,
                    key,
                    timeout_s=timeout_s,
                    project_now=_project_now,
                )
            )
            step.outcome(outcome)
    except FormatTooNew:  # a newer version's record (boundary.formats): logged there
        outcome = ToolOutcome.error(tool_call_id, ErrorCode(format_check.seal_too_new(key, None)))
    except Exception as exc:
        logger.error("project %s failed: %s", key.identity, type(exc).__name__)
        outcome = ToolOutcome.error(tool_call_id, ErrorCode.STORE_UNAVAILABLE)
        _resend_after_store_failure(key, attempt)
    if outcome.error_code is not None:
        # Raised outside any except block: no other exception rides along as its context.
        raise ToolCallFailed(outcome.error_code.value)
    return outcome.model_dump(mode="json")


def _report_sealed(key: CanonicalKey) -> dict[str, Any]:
    """The project step of a call the watchdog sealed: reports the record's outcome."""
    try:
        record = retrying(lambda: worker_runtime().store.get(key, with_raw=False))
    except Exception as exc:
        logger.error("project %s failed: %s", key.identity, type(exc).__name__)
        return {}
    if record is None:
        raise ToolCallFailed(ErrorCode.RECORD_NOT_FOUND.value)
    outcome = outcome_from_record(record)
    if outcome is None:
        return {}  # not this seal's record: left to its own steps
    if outcome.error_code is not None:
        raise ToolCallFailed(outcome.error_code.value)
    return outcome.model_dump(mode="json")


def send_projection(
    key: CanonicalKey, *, attempt: int = 0, countdown: float = 0, report: bool = False
) -> None:
    """Sends a call's project step (again), under its usual task id so its waiters wake;
    ``report``: one that only reports the call's sealed outcome."""
    ids = (key.run_id, key.tool_call_id)
    kwargs: dict[str, Any] = {"attempt": attempt} if attempt else {}
    if report:
        kwargs["report"] = True
    project_result.apply_async(
        args=ids,
        kwargs=kwargs,
        task_id=key.task_id("project"),
        queue=PROJECTIONS_QUEUE,
        countdown=countdown or None,
        argsrepr=repr(ids),
        kwargsrepr=repr(kwargs),
    )


def _resend_after_store_failure(key: CanonicalKey, attempt: int) -> None:
    """The store failed under the project step (the record is still PROJECTING): send the
    step again after a growing delay rather than leave the call to the reaper, which may be
    an hour away. The reaper stays the backstop (a broker on the same failed Redis)."""
    settings = get_runtime().settings
    if attempt >= settings.project_resends:
        return
    delay = min(STORE_RETRY_DELAY_S * 2 ** (attempt + 2), 60.0)
    try:
        send_projection(key, attempt=attempt + 1, countdown=delay)
        logger.warning("project %s sent again in %.0fs (store failed)", key.identity, delay)
    except Exception as exc:
        logger.error("project %s not sent again: %s", key.identity, type(exc).__name__)


@app.task(name=REAP)
def reap_stuck_calls() -> dict[str, int]:
    """Re-projects each call past its reap time whose raw response is kept; seals the others
    ERROR/WORKER_LOST (see ``boundary.reaper``)."""
    try:
        runtime = worker_runtime()
        settings = runtime.settings
        retries = Retries(
            registry=runtime.registry,
            sender=attempt_sender(),
            max_redispatches=settings.max_redispatches,
            max_pending_s=settings.max_pending_s,
            reap_grace_s=settings.reap_grace_s,
        )
        reaped = reap_once(
            runtime.store,
            send_projection,
            retry_after_s=settings.projection_timeout_s + settings.reap_grace_s,
            max_reprojections=settings.max_reprojections,
            retries=retries,
        )
    except Exception as exc:
        logger.error("reaper failed: %s", type(exc).__name__)
        return {"due": 0, "sealed": 0, "reprojected": 0, "retried": 0}
    return reaped.as_dict()


@app.task(name=FLOW_WAKE, ignore_result=True)
def wake_flow(tool: str) -> int:
    """Hands a limited tool's free slots to its line (scheduled for when its rate limit lets
    the next call start); the number of calls sent."""
    try:
        flow = worker_runtime().store.flow
        return flow.pump(tool) if isinstance(flow, Flow) else 0
    except Exception as exc:
        # The reaper's pass pumps every limited tool: the next one does what this could not.
        logger.error("flow wake-up failed: %s", type(exc).__name__)
        return 0


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
