"""Preflight: pure checks before anything is stored or run. Never raises."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from boundary.errors import ErrorCode
from boundary.jsonargs import ArgumentsRejected, parse_arguments
from boundary.limits import Limits
from boundary.models import CanonicalKey, RunContext, ToolCallEnvelope, is_safe_id
from boundary.registry import ToolRegistry, ToolSpec


@dataclass(frozen=True, slots=True)
class Accepted:
    """A call that passed preflight, ready to be created in the store."""

    key: CanonicalKey
    spec: ToolSpec
    arguments: dict[str, Any]
    #: Canonical JSON of ``arguments``: what the record stores as ``request``.
    request: str


@dataclass(frozen=True, slots=True)
class Rejected:
    code: ErrorCode
    #: For arguments that fail the tool's ``input_schema``: the failed schema keyword's JSON
    #: Pointer (never a value).
    path: str | None = None


def preflight(
    envelope: ToolCallEnvelope,
    run: RunContext,
    registry: ToolRegistry,
    limits: Limits,
    now: datetime | None = None,
) -> Accepted | Rejected:
    """Checks a call in the spec's order. Duplicates and budgets are checked atomically by the
    store's create step, since they depend on what other callers did a moment ago."""
    if not is_safe_id(envelope.tool_call_id):
        return Rejected(ErrorCode.INVALID_TOOL_CALL_ID)
    if envelope.run_id != run.run_id or not is_safe_id(run.run_id):
        return Rejected(ErrorCode.RUN_ID_MISMATCH)
    try:
        arguments, request = parse_arguments(envelope.arguments, limits)
    except ArgumentsRejected as rejected:
        return Rejected(rejected.code)
    spec = registry.get(envelope.tool_name)
    if spec is None:
        return Rejected(ErrorCode.UNKNOWN_TOOL)
    if spec.name not in run.authorized_tools:
        return Rejected(ErrorCode.UNAUTHORIZED)
    if not spec.read_only:
        return Rejected(ErrorCode.NOT_READ_ONLY)
    if not run.active:
        return Rejected(ErrorCode.RUN_INACTIVE)
    if run.deadline is not None and run.deadline <= (now or datetime.now(UTC)):
        return Rejected(ErrorCode.RUN_DEADLINE_EXCEEDED)
    # Last, so a call the run may not make learns nothing of the tool's schema.
    violation = spec.schema_violation(arguments)
    if violation is not None:
        return Rejected(ErrorCode.INVALID_ARGUMENTS, path=violation)
    assert envelope.tool_call_id is not None  # is_safe_id said so
    key = CanonicalKey(run_id=run.run_id, tool_call_id=envelope.tool_call_id)
    return Accepted(key=key, spec=spec, arguments=arguments, request=request)
