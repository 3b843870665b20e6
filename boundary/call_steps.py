"""The steps of a call that the sync path (``sync_calls``) and the async path
(``aio_calls``) share: pure functions, no I/O, no clock of their own.

Each path does its own I/O between them, the same way::

    prepare -> store.create -> refuse -> dispatch (on failure: seal, dispatch_failed)
    ... store.get -> outcome_from_record

Neither path imports the other; both import this module, which imports neither.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from pydantic import ValidationError

from boundary import formats
from boundary.errors import ErrorCode
from boundary.models import (
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
    is_safe_id,
)
from boundary.preflight import Rejected, preflight
from boundary.registry import ToolRegistry
from boundary.store.base import CanonicalStore, CreateResult, CreateStatus, CreateTerms
from boundary.store.seal_message import SealMessage


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call that passed preflight: its key and the arguments of ``store.create``."""

    key: CanonicalKey
    create: CreateTerms
    #: The queue of the tool's execute step (``ToolSpec.queue``).
    queue: str


class PrepareTerms(Protocol):
    """What ``prepare`` reads of a boundary (``door.CallTerms`` is the whole of it)."""

    store: CanonicalStore
    registry: ToolRegistry
    #: How long a call may stay PROJECTING when its run's deadline is later or absent, s.
    max_pending_s: float
    #: Grace past a call's deadline before the reaper may seal it, s.
    reap_grace_s: float
    #: Epoch seconds.
    clock: Callable[[], float]


def prepare(
    terms: PrepareTerms, envelope: ToolCallEnvelope, run: RunContext
) -> Submission | Prepared:
    """Preflight (reads the clock, no I/O): the rejection, or what ``create`` needs."""
    now = datetime.fromtimestamp(terms.clock(), tz=UTC)
    checked = preflight(envelope, run, terms.registry, terms.store.limits, now)
    if isinstance(checked, Rejected):
        return rejected(envelope, None, checked.code, path=checked.path)
    return Prepared(
        key=checked.key,
        create={
            "tool_name": checked.spec.name,
            "request": checked.request,
            "deadline": run.deadline,
            # The reaper may seal the call WORKER_LOST once it is PROJECTING past its run's
            # deadline or ``max_pending_s``, whichever comes first, plus the grace: durations,
            # counted by the store from its own clock (Redis TIME), so this process's clock
            # being off moves no reap time.
            "max_pending_s": terms.max_pending_s,
            "reap_grace_s": terms.reap_grace_s,
            "max_run_calls": run.max_tool_calls,
            "max_tool_calls": run.max_calls_per_tool.get(checked.spec.name),
        },
        queue=checked.spec.queue,
    )


def refuse(key: CanonicalKey, created: CreateResult, *, replay: bool = False) -> Submission | None:
    """``None`` when the call was created; else what ``submit`` answers (a replay of the
    same call is an accepted submission of the existing key)."""
    if created.status is CreateStatus.CREATED:
        return None
    if replay and created.status is CreateStatus.DUPLICATE:
        return Submission(key=key, accepted=True, replayed=True)
    code = created.status.error_code
    assert code is not None
    return turned_away(key, code)


def rejected(
    envelope: ToolCallEnvelope,
    key: CanonicalKey | None,
    code: ErrorCode,
    *,
    path: str | None = None,
) -> Submission:
    """A refused call: its error outcome names the call only by a safe id."""
    call_id = envelope.tool_call_id if is_safe_id(envelope.tool_call_id) else None
    outcome = ToolOutcome.error(call_id, code, path=path)
    return Submission(key=key, accepted=False, outcome=outcome)


def turned_away(key: CanonicalKey, code: ErrorCode) -> Submission:
    """A call refused after preflight: its key holds the call's id exactly as given (safe)."""
    return Submission(key=key, accepted=False, outcome=ToolOutcome.error(key.tool_call_id, code))


def dispatch_failed(key: CanonicalKey, record: CanonicalRecord | None) -> Submission:
    """What ``submit`` answers when the dispatch failed and the path then sealed the record
    DISPATCH_FAILED and read it back (``record``: ``None`` when that read failed)."""
    # If something sealed it first (an in-process step that ran before failing), the record
    # decides; else the call ended DISPATCH_FAILED.
    outcome = (record and outcome_from_record(record)) or ToolOutcome.error(
        key.tool_call_id, ErrorCode.DISPATCH_FAILED
    )
    return Submission(key=key, accepted=False, outcome=outcome)


def outcome_from_record(record: CanonicalRecord) -> ToolOutcome | None:
    """The agent-facing outcome of a sealed record; ``None`` while PROJECTING
    (``ToolOutcome.from_record``)."""
    return ToolOutcome.from_record(record)


def outcome_from_message(
    message: SealMessage | None, record: CanonicalRecord | None = None
) -> ToolOutcome | None:
    """The outcome a seal message carries (``seal_message.py``), as ``outcome_from_record``
    would make it from the sealed record; ``None`` (read the record) when there is no
    message, or it is not of ``record`` (the PROJECTING record the waiter read, if it read
    one: another ``created_at`` is another call, an older attempt is not this call's now),
    or it does not parse as a seal."""
    if message is None:
        return None
    if message.format > formats.CURRENT:  # sealed by a newer version (boundary.formats)
        formats.refused("seal message", message.format)
        return ToolOutcome.error(message.tool_call_id, ErrorCode.FORMAT_TOO_NEW)
    if record is not None and (
        message.created_at_ms != round(record.created_at.timestamp() * 1000)
        or message.attempt < record.attempt
    ):
        return None
    try:
        if message.status == InvocationStatus.READY.value:
            evidence = EvidenceStatus(message.evidence_status)
            if evidence is EvidenceStatus.ERROR or message.error_code:
                return None
            return ToolOutcome(
                tool_call_id=message.tool_call_id,
                status=InvocationStatus.READY,
                evidence_status=evidence,
                result=json.loads(message.agent_result) if message.agent_result else None,
                scope=json.loads(message.scope) if message.scope else None,
            )
        if message.status == InvocationStatus.ERROR.value:
            return ToolOutcome.error(message.tool_call_id, ErrorCode(message.error_code))
    except (ValueError, ValidationError):
        return None
    return None


def settled(key: CanonicalKey, record: CanonicalRecord | None) -> ToolOutcome | None:
    """What a wait answers from one read of the record: RECORD_NOT_FOUND for a missing
    record, the outcome of a sealed one, ``None`` while it is PROJECTING (wait on)."""
    if record is None:
        return ToolOutcome.error(key.tool_call_id, ErrorCode.RECORD_NOT_FOUND)
    return outcome_from_record(record)


def key_of(run_id: str, tool_call_id: str) -> CanonicalKey | None:
    """The call's key, or ``None`` for ids no record can have (answer RECORD_NOT_FOUND)."""
    try:
        return CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)
    except ValidationError:
        return None


#: Past a wait's own timeout, a read of the record it makes may take this long before the
#: wait gives up on a silent store (``STORE_UNAVAILABLE``): a wait ends by its timeout plus
#: this, whatever the store client's socket timeout (``docs/explanation/waits.md``).
READ_GRACE_S = 0.4


def give_up_at(timeout: float | None) -> float | None:
    """The monotonic time a wait of ``timeout`` seconds ends (``None``: never)."""
    return None if timeout is None else time.monotonic() + max(timeout, 0.0)


def time_left(give_up: float | None) -> float | None:
    """Seconds until ``give_up`` (at least 0; ``None``: no limit)."""
    return None if give_up is None else max(give_up - time.monotonic(), 0.0)
