"""The public data model: frozen pydantic v2 models validated where data enters."""

from __future__ import annotations

import json
import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from boundary.diagnostics import Diagnostic
from boundary.errors import ErrorCode

#: A run id or tool call id is safe when it matches this (no blanks, braces, colons, controls).
SAFE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
SAFE_ID = re.compile(SAFE_ID_PATTERN)


def is_safe_id(value: object) -> bool:
    """True when ``value`` is a string usable as a run id or tool call id, exactly as given."""
    return isinstance(value, str) and SAFE_ID.fullmatch(value) is not None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InvocationStatus(StrEnum):
    """Lifecycle of a canonical record: PROJECTING -> READY | ERROR, nothing else."""

    PROJECTING = "PROJECTING"
    READY = "READY"
    ERROR = "ERROR"


#: Statuses a record never leaves.
TERMINAL_STATUSES: frozenset[InvocationStatus] = frozenset(
    {InvocationStatus.READY, InvocationStatus.ERROR}
)


class EvidenceStatus(StrEnum):
    """What a sealed call says about the world."""

    EVIDENCE_FOUND = "EVIDENCE_FOUND"
    NO_EVIDENCE = "NO_EVIDENCE"
    ERROR = "ERROR"


#: Evidence statuses a projector may return (and a READY record may carry).
READY_EVIDENCE: frozenset[EvidenceStatus] = frozenset(
    {EvidenceStatus.EVIDENCE_FOUND, EvidenceStatus.NO_EVIDENCE}
)


class CanonicalKey(_Frozen):
    """The identity of one call: the run it belongs to and the framework's exact call id."""

    run_id: str = Field(pattern=SAFE_ID_PATTERN)
    tool_call_id: str = Field(pattern=SAFE_ID_PATTERN)

    @property
    def identity(self) -> str:
        """``run_id:tool_call_id``; unambiguous because safe ids hold no colon."""
        return f"{self.run_id}:{self.tool_call_id}"

    @classmethod
    def from_identity(cls, identity: str) -> CanonicalKey:
        run_id, _, tool_call_id = identity.partition(":")
        return cls(run_id=run_id, tool_call_id=tool_call_id)

    def task_id(self, step: str) -> str:
        """The Celery task id of a step of this call (``<run_id>:<tool_call_id>:<step>``)."""
        return f"{self.identity}:{step}"


class ToolCallEnvelope(_Frozen):
    """A tool call as the agent framework hands it over, before any check.

    Nothing is validated here beyond types: preflight turns every problem into an
    ``ErrorCode`` instead of an exception.
    """

    run_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    #: JSON text (str or UTF-8 bytes) or an already parsed dict.
    arguments: Any = None


class RunContext(_Frozen):
    """What the harness knows about the run a call claims to belong to."""

    run_id: str
    active: bool = True
    deadline: datetime | None = None
    authorized_tools: frozenset[str] = frozenset()
    #: ``None`` means no limit.
    max_tool_calls: int | None = Field(default=None, ge=0)
    max_calls_per_tool: dict[str, int] = Field(default_factory=dict)
    #: Whose calls these are, for fair turns between tenants at a limited tool (a safe id);
    #: ``None``: the one shared tenant.
    tenant: str | None = Field(default=None, pattern=SAFE_ID_PATTERN)
    #: Order of this run's waiting calls within its tenant: higher first (default 0).
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1)

    @field_validator("deadline")
    @classmethod
    def _deadline_is_aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("deadline must be timezone-aware")
        return value

    @field_validator("max_calls_per_tool")
    @classmethod
    def _limits_not_negative(cls, value: dict[str, int]) -> dict[str, int]:
        if any(limit < 0 for limit in value.values()):
            raise ValueError("per-tool limits must be >= 0")
        return value


class CanonicalRecord(_Frozen):
    """The one record of a call, as stored. JSON fields hold canonical JSON text.

    ``raw`` is Harness-only: it never reaches an agent.
    """

    #: The run the call belongs to (a safe id, the key's hash tag).
    run_id: str
    #: The framework's own id of the call, used exactly as given.
    tool_call_id: str
    #: The registered tool the call names.
    tool_name: str
    #: PROJECTING until sealed, then READY or ERROR, once.
    status: InvocationStatus
    #: EVIDENCE_FOUND or NO_EVIDENCE when READY, ERROR when ERROR; ``None`` while PROJECTING.
    evidence_status: EvidenceStatus | None = None
    #: The call's complete arguments object, as canonical JSON.
    request: str
    #: The tool's complete raw response (Harness-only; never truncated or previewed).
    raw: str | None = None
    #: The bounded result the agent gets, from the projector.
    agent_result: str | None = None
    #: What the result covers (the projector's scope), kept with a NO_EVIDENCE result too.
    scope: str | None = None
    #: The stable code of an ERROR record.
    error_code: ErrorCode | None = None
    #: The call's acceptance order within its run (facts are read in this order).
    seq: int
    #: When the create script accepted the call (Redis's clock).
    created_at: datetime
    #: The record's last write or heartbeat.
    updated_at: datetime
    #: The run's deadline, copied at create; ``None``: none.
    deadline: datetime | None = None
    #: Why the tool or projector failed (type and frame, never the message); Harness-only.
    diagnostic: Diagnostic | None = None
    #: The call's fingerprint (``boundary.fingerprint.request_sha256``), set once at create;
    #: ``None`` for a record written before fingerprints existed.
    request_sha256: str | None = None
    #: Which send of the call's execute step is current: 1, then one more per retry (and per
    #: re-send of a message that never reached a worker). Budgets count the call once.
    attempt: int = 1
    #: When the current attempt's tool started (``None``: not started yet).
    started_at: datetime | None = None
    #: The tool's last stored heartbeat in this attempt.
    heartbeat_at: datetime | None = None
    #: The tool's last reported fraction done (0..1).
    progress: float | None = None
    #: The tool's last status line (agent-visible: never raw data).
    progress_message: str | None = None
    #: The version of the projector that sealed the record (``ToolSpec.projector_version``);
    #: ``None`` for a record sealed before versions were written, or sealed with no
    #: projection (the tool failed).
    projector_version: str | None = None
    #: Attempts of the call a draining worker handed back to another one (SIGTERM past
    #: ``TOOL_BOUNDARY_WORKER_DRAIN_S``): not counted as retries of the tool.
    handbacks: int = 0

    @property
    def key(self) -> CanonicalKey:
        return CanonicalKey(run_id=self.run_id, tool_call_id=self.tool_call_id)


class CallProgress(_Frozen):
    """How far a running call got, as its tool last reported (``heartbeat()``).

    Shown to people and agents while the call is PROJECTING: ``message`` is the tool's own
    short status line (documented as agent-visible), never raw data.
    """

    fraction: float | None = None
    message: str | None = None
    attempt: int = 1
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    #: The call waits for a slot of its tool (fleet flow control): it has not started.
    waiting: bool = False
    #: While waiting: calls of the tool ahead of it in line (``None``: not known).
    ahead: int | None = None

    @classmethod
    def of(cls, record: CanonicalRecord | None) -> CallProgress | None:
        """The progress of a PROJECTING record whose tool has started; else ``None``."""
        if (
            record is None
            or record.status is not InvocationStatus.PROJECTING
            or record.started_at is None
        ):
            return None
        return cls(
            fraction=record.progress,
            message=record.progress_message,
            attempt=record.attempt,
            started_at=record.started_at,
            heartbeat_at=record.heartbeat_at,
        )

    def as_agent_view(self) -> dict[str, Any]:
        """What a model reads of it: the fraction, the message and the attempt."""
        view: dict[str, Any] = {"attempt": self.attempt}
        if self.fraction is not None:
            view["fraction"] = self.fraction
        if self.message is not None:
            view["message"] = self.message
        return view


class Projection(_Frozen):
    """What a projector returns: a small, safe view of a raw response."""

    evidence_status: EvidenceStatus
    result: Any = None
    #: What the observation covers (e.g. the query); kept for NO_EVIDENCE.
    scope: Any = None


class ToolOutcome(_Frozen):
    """The agent-facing end of a call: a bounded result, a stable error code, or (when a
    wait ran out first) the fact that the call is still running. Nothing raw."""

    tool_call_id: str | None
    status: InvocationStatus
    #: ``None`` only while the call is PROJECTING (nothing is known about evidence yet).
    evidence_status: EvidenceStatus | None
    result: Any = None
    scope: Any = None
    error_code: ErrorCode | None = None
    #: INVALID_ARGUMENTS from the tool's ``input_schema`` only: the JSON Pointer of the schema
    #: keyword the arguments failed (``/properties/limit/maximum``). Comes from the schema,
    #: never from the arguments, so it holds no value the model sent.
    error_path: str | None = None
    #: While PROJECTING, how far the running tool got (``None`` once sealed, and before the
    #: tool starts).
    progress: CallProgress | None = None

    @property
    def error_message(self) -> str | None:
        """The fixed sentence for ``error_code``."""
        return self.error_code.message if self.error_code is not None else None

    @property
    def is_error(self) -> bool:
        """True when the call ended in ERROR (``error_code`` says why)."""
        return self.status is InvocationStatus.ERROR

    @property
    def pending(self) -> bool:
        """True when the call is still running: ask again later with the same ids."""
        return self.status is InvocationStatus.PROJECTING

    def as_text(self) -> str:
        """The one text a model reads for this outcome: canonical JSON, the same for the same
        outcome. READY: status, evidence status, the bounded result (and its scope). ERROR:
        the stable code and its fixed sentence (and a schema refusal's schema path), never
        anything raw. PROJECTING: a fixed note to ask again for this tool_call_id."""
        if self.status is InvocationStatus.READY:
            ready: dict[str, Any] = {
                "status": "READY",
                "evidence_status": self.evidence_status,
                "result": self.result,
            }
            if self.scope is not None:
                ready["scope"] = self.scope
            return _canonical(ready)
        if self.status is InvocationStatus.ERROR:
            error: dict[str, Any] = {
                "status": "ERROR",
                "error_code": self.error_code,
                "message": self.error_message,
            }
            if self.error_path is not None:
                error["error_path"] = self.error_path
            return _canonical(error)
        if self.progress is not None:
            running = {"status": "PROJECTING", "message": _PENDING_NOTE}
            return _canonical(running | {"progress": self.progress.as_agent_view()})
        return PENDING_TEXT

    @classmethod
    def error(
        cls, tool_call_id: str | None, code: ErrorCode, *, path: str | None = None
    ) -> ToolOutcome:
        return cls(
            tool_call_id=tool_call_id,
            status=InvocationStatus.ERROR,
            evidence_status=EvidenceStatus.ERROR,
            error_code=code,
            error_path=path,
        )

    @classmethod
    def from_record(cls, record: CanonicalRecord) -> ToolOutcome | None:
        """The agent-facing outcome of a sealed record; ``None`` while it is PROJECTING."""
        if record.status is InvocationStatus.READY:
            return cls(
                tool_call_id=record.tool_call_id,
                status=InvocationStatus.READY,
                evidence_status=record.evidence_status or EvidenceStatus.ERROR,
                result=json.loads(record.agent_result) if record.agent_result else None,
                scope=json.loads(record.scope) if record.scope else None,
            )
        if record.status is InvocationStatus.ERROR:
            return cls.error(
                record.tool_call_id, record.error_code or ErrorCode.TOOL_EXECUTION_FAILED
            )
        return None

    @classmethod
    def running(cls, tool_call_id: str | None, progress: CallProgress | None = None) -> ToolOutcome:
        """The outcome of a wait that ran out while the call was still PROJECTING."""
        return cls(
            tool_call_id=tool_call_id,
            status=InvocationStatus.PROJECTING,
            evidence_status=None,
            progress=progress,
        )


def _canonical(value: Any) -> str:
    return json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
    )


#: What a model is told about a call that is still running (``ToolOutcome.as_text``).
_PENDING_NOTE = "The call is still running; ask again for this tool_call_id."
PENDING_TEXT = _canonical({"status": "PROJECTING", "message": _PENDING_NOTE})


class Submission(_Frozen):
    """What ``ToolBoundary.submit`` returns."""

    key: CanonicalKey | None
    accepted: bool
    #: The immediate ERROR outcome when the call was not accepted, else ``None``.
    outcome: ToolOutcome | None = None
    #: ``submit(..., replay=True)`` found the same call already made under this key: nothing
    #: was created or dispatched; its outcome is the first call's (``outcome()``).
    replayed: bool = False


class ObservedFact(_Frozen):
    """One READY call of a run, as an observation. NO_EVIDENCE facts are negative."""

    tool_call_id: str
    tool_name: str
    evidence_status: EvidenceStatus
    result: Any = None
    scope: Any = None
    #: The version of the projector that made it (``None``: a record sealed before versions
    #: were written).
    projector_version: str | None = None

    @property
    def negative(self) -> bool:
        """True for a scoped negative observation (NO_EVIDENCE): never found evidence."""
        return self.evidence_status is EvidenceStatus.NO_EVIDENCE


class ObservedFacts(_Frozen):
    """The bounded observations of a run, in acceptance order."""

    run_id: str
    facts: tuple[ObservedFact, ...] = ()
    #: Indexed identities left out, by reason (missing, expired, cross_run, projecting, error).
    excluded: dict[str, int] = Field(default_factory=dict)
    #: READY facts cut by the count or byte bounds.
    omitted: int = 0

    @property
    def evidence_count(self) -> int:
        return sum(1 for f in self.facts if f.evidence_status is EvidenceStatus.EVIDENCE_FOUND)
