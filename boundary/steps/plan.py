"""After a worker's execute step: the project step run in line when the worker does that
(``Settings.project_in_line``), and the one decision about the call's project step
(``ProjectPlan``), which the worker's one sender of project steps carries out.

The execute task's project step rides in its message (the dispatcher chains it). Once the
execute step ended, it either goes to project the call (``PROJECT``), goes only to report the
call's sealed outcome (``REPORT``: the call was sealed ERROR here, and monitoring lists a
call's end on its project task), or does not go (``SKIP``: another attempt's message carries
its own, the call was sealed READY here, or this task reports the end). The watchdog that seals
a call while its tool or projector still runs in line sends that plan early (``REPORT``, through
``AttemptTerms.project_now``), and the step then ends ``HANDED_ON``: nothing left to send.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from boundary import handback, telemetry
from boundary.errors import ErrorCode, StoreError
from boundary.models import CanonicalKey, ToolOutcome
from boundary.registry import ToolRegistry
from boundary.steps.attempts import ExecuteResult
from boundary.steps.execute import HeldRaw, keep_held
from boundary.steps.project import DEFAULT_PROJECTION_TIMEOUT_S, project_held, project_step
from boundary.store.base import CanonicalStore

__all__ = ["SUPERSEDED", "Attempted", "InLine", "ProjectPlan", "after_execute", "plan_of"]

logger = logging.getLogger(__name__)

#: The code of an execute task whose attempt another attempt took over (its worker was
#: judged lost, or it timed out and was retried): not an ``ErrorCode``, the call goes on.
SUPERSEDED = "SUPERSEDED"


class ProjectPlan(StrEnum):
    """What becomes of a call's project step once its execute step ended."""

    #: It goes: it projects the raw response and seals the call.
    PROJECT = "PROJECT"
    #: It goes, only to report the call's sealed outcome (``project_result(report=True)``).
    REPORT = "REPORT"
    #: It does not go.
    SKIP = "SKIP"


@dataclass(frozen=True, slots=True)
class Attempted:
    """How an execute task ends: what it returns, the code it fails with (``None``: it
    succeeds), and its call's project step's plan."""

    plan: ProjectPlan
    #: The step's status name, or the bounded outcome of a call sealed READY in line.
    returned: str | dict[str, Any]
    #: ``CANCELLED`` (the cancel revoked the project task: this task reports it) or
    #: ``SUPERSEDED`` (another attempt has the call); the plan is then ``SKIP``.
    failed: str | None = None


@dataclass(frozen=True, slots=True)
class InLine:
    """How a worker projects in line after the execute step (``Settings.project_in_line``)."""

    registry: ToolRegistry
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S
    #: Sends the call's project step at once, to report a seal the watchdog made while the
    #: projector still runs in line (``AttemptTerms.project_now``).
    project_now: Callable[[CanonicalKey], None] | None = None
    #: The trace context the project span joins (the execute task's request).
    carrier: object = None


def plan_of(executed: ExecuteResult, outcome: ToolOutcome | None) -> ProjectPlan:
    """The project step's plan after the execute step ended ``executed`` and, when the call
    was projected in line, sealed with ``outcome``."""
    if executed is ExecuteResult.HANDED_ON:
        return ProjectPlan.SKIP  # the current attempt's message carries its own
    if outcome is None:
        return ProjectPlan.PROJECT
    if outcome.error_code is None:
        return ProjectPlan.SKIP  # it ran here
    if outcome.error_code is ErrorCode.STORE_UNAVAILABLE:
        return ProjectPlan.PROJECT  # a store that could not say: a whole project step
    # Sealed ERROR here: the project task only reports it (Flower's failed task), without
    # projecting again (no second project span or duration sample).
    return ProjectPlan.REPORT


def after_execute(
    store: CanonicalStore,
    retried: CanonicalStore,
    key: CanonicalKey,
    executed: ExecuteResult | HeldRaw,
    *,
    attempt: int,
    in_line: InLine | None = None,
) -> Attempted:
    """What the execute task of attempt ``attempt`` ends with, once its step ended
    ``executed``: with ``in_line``, the call projected and sealed here first (a held response
    kept with its seal; one kept by an earlier attempt projected from the store).
    ``store`` is read and written once each, not retried (a failure here leaves the call to
    its project task, which retries); ``retried``: the same store, each of whose operations
    the worker retries where it failed."""
    outcome = None
    if isinstance(executed, HeldRaw):
        assert in_line is not None  # only an in-line worker holds a response
        executed, outcome = _held_in_line(store, retried, in_line, executed)
    elif executed is ExecuteResult.STORED and in_line is not None:
        # Kept by an earlier attempt: projected from the store.
        ended = _in_line(key, in_line, lambda: _project_stored(store, in_line, key))
        outcome = ended if isinstance(ended, ToolOutcome) else None
    plan = plan_of(executed, outcome)
    if outcome is not None and outcome.error_code is None:
        return Attempted(plan, outcome.model_dump(mode="json"))
    failed = attempt_failed(store, key, attempt, executed)
    if failed == ErrorCode.CANCELLED.value:
        plan = ProjectPlan.SKIP  # this task reports it (the cancel revoked the other)
    return Attempted(plan, executed.value, failed)


def attempt_failed(
    store: CanonicalStore, key: CanonicalKey, attempt: int, executed: ExecuteResult
) -> str | None:
    """The code the execute task fails with (Flower's "Failed"), or ``None``: it succeeds.

    - ``CANCELLED``: the call was cancelled while this attempt ran (the cancel revoked the
      project task, so no other task reports it);
    - ``SUPERSEDED``: another attempt has the call (this one was lost, or handed it on).

    Any other seal is reported by the call's project task. One read, only after a step that
    did not keep a raw response; a store that cannot say lets the task succeed as before.
    """
    if executed not in (ExecuteResult.SEALED, ExecuteResult.HANDED_ON):
        return None
    try:
        record = store.get(key, with_raw=False)
    except StoreError:
        return None
    if record is None:
        return None
    if executed is ExecuteResult.SEALED and record.error_code is ErrorCode.CANCELLED:
        return ErrorCode.CANCELLED.value
    if executed is ExecuteResult.HANDED_ON and record.attempt > attempt:
        # A draining worker's hand-back is shown as such (boundary.handback).
        return handback.HANDED_BACK if handback.handed_back(key, attempt) else SUPERSEDED
    return None


def _project_stored(store: CanonicalStore, in_line: InLine, key: CanonicalKey) -> ToolOutcome:
    return project_step(
        store, in_line.registry, key, timeout_s=in_line.timeout_s, project_now=in_line.project_now
    )


def _held_in_line(
    store: CanonicalStore, retried: CanonicalStore, in_line: InLine, held: HeldRaw
) -> tuple[ExecuteResult, ToolOutcome | None]:
    """Projects the raw response the execute step held and seals the call with it: how the
    execute step ended, and the outcome when sealed here. A failure here (the store's) keeps
    the response alone (retried) and gives no outcome: the project task projects it."""
    ended = _in_line(
        held.record.key,
        in_line,
        lambda: project_held(
            store,
            in_line.registry,
            held,
            timeout_s=in_line.timeout_s,
            project_now=in_line.project_now,
        ),
    )
    if ended is None:
        return keep_held(retried, held), None
    if isinstance(ended, ExecuteResult):
        return ended, None
    return ExecuteResult.STORED, ended


def _in_line(
    key: CanonicalKey, in_line: InLine, project: Callable[[], ToolOutcome | ExecuteResult]
) -> ToolOutcome | ExecuteResult | None:
    """Runs a project step on this thread as the call's project span; ``None`` when it
    failed (the store's failure: logged by its type only)."""
    try:
        with telemetry.worker_step(telemetry.PROJECT, key, in_line.carrier) as step:
            ended = project()
            if isinstance(ended, ToolOutcome):
                step.outcome(ended)
    except Exception as exc:
        logger.error("project %s in line failed: %s", key.identity, type(exc).__name__)
        return None
    return ended
