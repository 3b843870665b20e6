"""The project step: projects a call's stored raw response (or the one its execute step held,
``project_held``) with its tool's projector, under a time limit, and seals the record READY or
ERROR. No projector's exception gets out: each becomes a stable code on the record. Store
errors do propagate (``StoreError``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TypedDict

from pydantic import ValidationError

from boundary import telemetry
from boundary.diagnostics import Diagnostic
from boundary.errors import ErrorCode, ToolTimeout
from boundary.handover import process_handover
from boundary.limits import Limits, canonical_json, utf8_size
from boundary.models import (
    READY_EVIDENCE,
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    Projection,
    ToolOutcome,
)
from boundary.record_size import record_fits
from boundary.registry import ToolRegistry
from boundary.steps.attempts import NOT_REGISTERED, PROJECT, ExecuteResult, failure
from boundary.steps.execute import HeldRaw
from boundary.store.base import CanonicalStore, WriteStatus
from boundary.tool_threads import ToolOverdue, run_bounded

__all__ = [
    "DEFAULT_PROJECTION_TIMEOUT_S",
    "project_held",
    "project_or_report",
    "project_raw",
    "project_step",
    "report_step",
]

logger = logging.getLogger(__name__)

#: Seconds a projector may run before the call is sealed PROJECTION_FAILED. Projectors are
#: pure and small; one that runs this long is hung.
DEFAULT_PROJECTION_TIMEOUT_S = 30.0


def _validated(value: object) -> Projection | ErrorCode:
    if isinstance(value, Projection):
        projection = value
    elif isinstance(value, Mapping):
        try:
            projection = Projection.model_validate(dict(value))
        except ValidationError as exc:
            if any(err["loc"][:1] == ("evidence_status",) for err in exc.errors()):
                return ErrorCode.INVALID_EVIDENCE_STATUS
            return ErrorCode.PROJECTION_FAILED
    else:
        return ErrorCode.PROJECTION_FAILED
    if projection.evidence_status not in READY_EVIDENCE:
        return ErrorCode.INVALID_EVIDENCE_STATUS
    return projection


def project_step(
    store: CanonicalStore,
    registry: ToolRegistry,
    key: CanonicalKey,
    *,
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
    project_now: Callable[[CanonicalKey], None] | None = None,
) -> ToolOutcome:
    """Projects the stored raw response and seals the record READY or ERROR.

    The projector runs at most ``timeout_s``; past it the call is sealed PROJECTION_FAILED.
    A projector run in line that overruns is sealed by the watchdog, which then calls
    ``project_now(key)`` (a worker sends this step again, so the call's waiters hear of the
    seal without waiting for the projector to come back).

    Returns the call's outcome: the bounded agent result, or a stable error code.
    """
    # Left by this call's execute step in this process (see ``boundary.handover``): then the
    # seal names its creation time, so a later call under the same ids is never sealed.
    record = process_handover().take(key)
    handed_over = record.created_at if record is not None else None
    if record is None:
        record = store.get(key)
    if record is None:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
    telemetry.step_record(record)
    sealed = ToolOutcome.from_record(record)
    if sealed is not None:
        return sealed
    written, outcome = _project_record(
        store, registry, record, handed_over, timeout_s=timeout_s, project_now=project_now
    )
    if written is None or written is WriteStatus.OK:
        return outcome
    if written is WriteStatus.REPLACED:
        # The handed-over record had expired and another call took its ids: project that
        # one, as read from the store.
        return project_step(store, registry, key, timeout_s=timeout_s, project_now=project_now)
    # Someone else (the reaper, a redelivered message) sealed it first: the record decides.
    return _final_outcome(store, key)


def report_step(store: CanonicalStore, key: CanonicalKey) -> ToolOutcome | None:
    """The project step of a call sealed elsewhere (the watchdog's early send, or an execute
    step that sealed the call ERROR in line): the sealed record's outcome, never a seal.
    ``None`` for a record found PROJECTING: another call's under the same ids, or the call's
    next attempt, left to its own steps."""
    record = store.get(key, with_raw=False)
    if record is None:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
    return ToolOutcome.from_record(record)


def project_or_report(
    store: CanonicalStore,
    registry: ToolRegistry,
    key: CanonicalKey,
    *,
    report: bool,
    retry: Callable[[Callable[[], ToolOutcome | None]], ToolOutcome | None],
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
    project_now: Callable[[CanonicalKey], None] | None = None,
    carrier: object = None,
) -> ToolOutcome | None:
    """A project task's step, whole, under the worker's ``retry`` (the step is idempotent):
    ``report_step`` with ``report``, else ``project_step`` as the call's project span in the
    trace ``carrier`` carries. Store errors propagate once ``retry`` gives up."""
    if report:
        return retry(lambda: report_step(store, key))
    with telemetry.worker_step(telemetry.PROJECT, key, carrier) as step:
        outcome = retry(
            lambda: project_step(store, registry, key, timeout_s=timeout_s, project_now=project_now)
        )
        if outcome is not None:
            step.outcome(outcome)
    return outcome


def project_held(
    store: CanonicalStore,
    registry: ToolRegistry,
    held: HeldRaw,
    *,
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
    project_now: Callable[[CanonicalKey], None] | None = None,
) -> ToolOutcome | ExecuteResult:
    """``project_step`` of a raw response the execute step held (``hold_raw=True``): projects
    it and seals the record with it, in one write fenced by the attempt, so the record never
    holds the response without its seal.

    Returns the call's outcome; or, when the seal was refused, how the execute step ends as
    the write of the response alone would have ended it: ``HANDED_ON`` (another attempt has
    the call), ``SEALED`` (sealed by someone else: the record decides), ``MISSING``.
    """
    record = held.record
    key = record.key
    telemetry.step_record(record)
    written, outcome = _project_record(
        store,
        registry,
        record,
        record.created_at,
        timeout_s=timeout_s,
        project_now=project_now,
        held=held,
    )
    if written is None:
        return outcome
    if written is WriteStatus.OK:
        telemetry.stored()
        return outcome
    if written is WriteStatus.ALREADY_STORED:
        # A response is kept already (not this attempt's): the record decides.
        return project_step(store, registry, key, timeout_s=timeout_s, project_now=project_now)
    if written is WriteStatus.SUPERSEDED:
        return held._holder.stale("raw response")
    if written is WriteStatus.NOT_PROJECTING:
        return ExecuteResult.SEALED
    # MISSING, or REPLACED: the record this attempt claimed is gone.
    return ExecuteResult.MISSING


def _project_record(
    store: CanonicalStore,
    registry: ToolRegistry,
    record: CanonicalRecord,
    handed_over: datetime | None,
    *,
    timeout_s: float,
    project_now: Callable[[CanonicalKey], None] | None,
    held: HeldRaw | None = None,
) -> tuple[WriteStatus | None, ToolOutcome]:
    """Projects the record's raw response and seals it (with the held response, as its
    attempt, when ``held``): the seal's write status and the outcome; ``None``: the watchdog
    sealed it (its outcome)."""
    key = record.key
    spec = registry.get(record.tool_name)
    version = spec.projector_version if spec is not None else None
    kept: KeptTerms = {} if held is None else {"raw": record.raw, "attempt": held.attempt}

    def overdue() -> ToolOutcome:
        # On the watchdog's side, at the deadline, while the projector may still run in line.
        note = f"the projector ran past its time limit of {timeout_s:g}s"
        failed = failure(record.tool_name, ErrorCode.PROJECTION_FAILED, PROJECT, note=note)
        written = _seal_failed_projection(store, key, failed, handed_over, version, kept=kept)
        outcome = _final_outcome(store, key)
        if written is WriteStatus.OK:
            if held is not None:
                telemetry.stored()
            telemetry.sealed(outcome)
        if project_now is not None:
            project_now(key)
        return outcome

    try:
        projected = project_raw(registry, record, store.limits, timeout_s, overdue)
    except ToolOverdue as late:
        if isinstance(late.outcome, ToolOutcome):
            return None, late.outcome
        # The watchdog could not seal it (the store failed under it): seal it here.
        note = f"the projector ran past its time limit of {timeout_s:g}s"
        projected = failure(record.tool_name, ErrorCode.PROJECTION_FAILED, PROJECT, note=note)
    if isinstance(projected, Diagnostic):
        written = _seal_failed_projection(store, key, projected, handed_over, version, kept=kept)
        outcome = ToolOutcome.error(key.tool_call_id, projected.error_code)
    else:
        outcome, result, scope = projected
        assert outcome.evidence_status is not None  # a READY outcome always has one
        written = store.seal(
            key,
            evidence_status=outcome.evidence_status,
            agent_result=result,
            scope=scope,
            created_at=handed_over,
            projector_version=version,
            **kept,
        )
    if written is WriteStatus.OK:
        telemetry.sealed(outcome)
    return written, outcome


class KeptTerms(TypedDict, total=False):
    """What a seal of a held response adds to its terms: the response, and its attempt."""

    raw: str | None
    attempt: int | None


def _seal_failed_projection(
    store: CanonicalStore,
    key: CanonicalKey,
    failed: Diagnostic,
    handed_over: datetime | None,
    version: str | None,
    *,
    kept: KeptTerms,
) -> WriteStatus:
    """Seals the call ERROR with the diagnostic's code (a projection that failed)."""
    failed.log(key.identity)
    written = store.seal(
        key,
        evidence_status=EvidenceStatus.ERROR,
        error_code=failed.error_code,
        diagnostic=failed,
        created_at=handed_over,
        projector_version=version,
        **kept,
    )
    logger.info("call %s sealed ERROR %s", key.identity, failed.error_code.value)
    return written


def project_raw(
    registry: ToolRegistry,
    record: CanonicalRecord,
    limits: Limits,
    timeout_s: float,
    on_overdue: Callable[[], ToolOutcome] | None = None,
) -> tuple[ToolOutcome, str, str | None] | Diagnostic:
    """The READY outcome with its result and scope as canonical JSON, or why it failed (the
    diagnostic carries the code to seal ERROR with): the record's raw response projected by
    its tool's projector in ``registry``, with the checks of a seal. Writes nothing (a
    re-projection uses it too: ``boundary.reprojection``)."""
    tool = record.tool_name
    spec = registry.get(tool)
    if spec is None:
        return failure(tool, ErrorCode.PROJECTION_FAILED, PROJECT, note=NOT_REGISTERED)
    if record.raw is None:
        # The execute step ended without keeping a response: the store failed under it.
        note = "no raw response was kept"
        return failure(tool, ErrorCode.STORE_UNAVAILABLE, PROJECT, note=note)
    raw, request = json.loads(record.raw), json.loads(record.request)
    try:
        # Under a time limit (on a tool thread, or in line under the watchdog): a hung
        # projector must not hold the worker's projection slot (and every later call behind
        # it) nor its warm shutdown.
        value = run_bounded(
            lambda _: spec.projector.project(raw, request), None, timeout_s, on_overdue=on_overdue
        )
    except ToolOverdue:
        raise
    except ToolTimeout:
        note = f"the projector ran past its time limit of {timeout_s:g}s"
        return failure(tool, ErrorCode.PROJECTION_FAILED, PROJECT, note=note)
    except Exception as exc:
        return failure(tool, ErrorCode.PROJECTION_FAILED, PROJECT, exc)
    projection = _validated(value)
    if isinstance(projection, ErrorCode):
        note = f"the projector returned {type(value).__name__}, not a valid Projection"
        return failure(tool, projection, PROJECT, note=note)
    try:
        result = canonical_json(projection.result)
        scope = None if projection.scope is None else canonical_json(projection.scope)
        agent_bytes = utf8_size(result) + (utf8_size(scope) if scope else 0)
    except Exception as exc:  # as for raw responses: anything raised while serializing
        return failure(tool, ErrorCode.SERIALIZATION_FAILED, PROJECT, exc)
    if agent_bytes > limits.max_agent_result_bytes or (
        not record_fits(record, limits.max_record_bytes, agent_result=result, scope=scope)
    ):
        note = f"agent result of {agent_bytes} bytes; max {limits.max_agent_result_bytes}"
        return failure(tool, ErrorCode.RESULT_TOO_LARGE, PROJECT, note=note)
    outcome = ToolOutcome(
        tool_call_id=record.tool_call_id,
        status=InvocationStatus.READY,
        evidence_status=projection.evidence_status,
        # Parsed back from the canonical text, so the outcome equals what a later read gives.
        result=json.loads(result),
        scope=None if scope is None else json.loads(scope),
    )
    return outcome, result, scope


def _final_outcome(store: CanonicalStore, key: CanonicalKey) -> ToolOutcome:
    """Reads back what the record says now: whoever sealed it decided."""
    record = store.get(key, with_raw=False)
    if record is None:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
    return ToolOutcome.from_record(record) or ToolOutcome.error(
        key.tool_call_id, ErrorCode.STORE_UNAVAILABLE
    )
