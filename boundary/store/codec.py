"""What the Redis stores (sync and asyncio) send and read back, without a driver: the Lua
scripts' KEYS/ARGV and replies, record decoding, progress parsing."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from boundary import formats
from boundary.diagnostics import Diagnostic
from boundary.errors import ErrorCode, StoreError
from boundary.fingerprint import request_sha256
from boundary.models import (
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    is_safe_id,
)
from boundary.store import keys
from boundary.store.base import (
    CreateResult,
    CreateStatus,
    CreateTerms,
    ProgressEntry,
    ProgressRow,
    SealTerms,
    WriteStatus,
)
from boundary.store.codes import ScriptCode

#: A conditional write's code (``ScriptCode``, the record scripts' one table) as its status.
WRITE_CODES = {
    ScriptCode.OK: WriteStatus.OK,
    ScriptCode.MISSING: WriteStatus.MISSING,
    ScriptCode.NOT_PROJECTING: WriteStatus.NOT_PROJECTING,
    ScriptCode.ALREADY_STORED: WriteStatus.ALREADY_STORED,
    ScriptCode.REPLACED: WriteStatus.REPLACED,
    ScriptCode.SUPERSEDED: WriteStatus.SUPERSEDED,
    ScriptCode.NOT_DUE: WriteStatus.NOT_DUE,
    ScriptCode.STARTED: WriteStatus.STARTED,
}


def write_status(code: Any) -> WriteStatus:
    """A script's code of a conditional write as its status."""
    return WRITE_CODES[ScriptCode(int(code))]


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def exact_ms(moment: datetime) -> int:
    """Epoch ms of a time read from a record (``_from_ms``), back as the store wrote it
    (rounded: the float of ``timestamp()`` may fall a hair below the millisecond)."""
    return round(moment.timestamp() * 1000)


def raw_result(code: Any) -> tuple[WriteStatus, datetime | None]:
    """``store_raw.lua``'s reply: the write status, and the write time when stored."""
    written = int(code)
    if written >= 1:
        return WriteStatus.OK, _from_ms(str(written))
    return write_status(written), None


def timed_result(code: Any) -> WriteStatus:
    """The reply of a script that answers its write time (> 1) when it wrote, else a
    ``WRITE_CODES`` code (``heartbeat.lua``)."""
    written = int(code)
    return WriteStatus.OK if written >= 1 else write_status(written)


def from_ms(value: str | int | None) -> datetime | None:
    """An epoch-ms time as a script or a record gives it; ``None`` for none."""
    return _from_ms(None if value is None else str(value))


def _from_ms(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


#: What a run projection or an outcome reads of a record: everything but the raw response,
#: which they never use and which may be up to ``max_raw_bytes`` per call.
PROGRESS_FIELDS = (
    "run_id",
    "tool_call_id",
    "tool_name",
    "status",
    "evidence_status",
    "request",
    "agent_result",
    "scope",
    "error_code",
    "seq",
    "created_at",
    "updated_at",
    "deadline",
    "diagnostic",
    "request_sha256",
    "attempt",
    "started_at",
    "heartbeat_at",
    "progress",
    "progress_message",
    "projector_version",
    "handbacks",
    "format",
)


def _diagnostic(text: str | None) -> Diagnostic | None:
    """A diagnostic this code did not write is left out: it never decides anything."""
    if not text:
        return None
    try:
        return Diagnostic.model_validate_json(text)
    except ValidationError:
        return None


#: Optional text fields kept as read, an empty string included.
_KEPT_TEXT = ("raw", "agent_result", "scope")
#: Optional fields for which an empty string means none.
_TEXT_OR_NONE = (
    "evidence_status",
    "error_code",
    "request_sha256",
    "progress_message",
    "projector_version",
)
_TIMES_OR_NONE = ("deadline", "started_at", "heartbeat_at")


def decode_record(fields: dict[str, str]) -> CanonicalRecord:
    """The record of an HMGET/HGETALL reply, validated by the model; an optional field
    that is absent (or empty, where empty means none) is left to its default, which
    validation need not check (a run projection decodes a record per call)."""
    formats.check_record(fields)  # FormatTooNew (FORMAT_TOO_NEW) for a newer format
    try:
        return CanonicalRecord.model_validate(_record_values(fields))
    except (KeyError, ValueError, ValidationError):
        # A record this code did not write: refuse it rather than guess.
        raise StoreError(ErrorCode.STORE_UNAVAILABLE) from None


def readable(fields: dict[str, str]) -> bool:
    """True when ``decode_record(fields)`` gives a record: the same conversions, in the same
    order, and the two checks its model adds to them (the evidence status and the error code
    are members of their enums), without building the model or its values. A batch of runs'
    facts reads a record per call this way (``boundary.progress``); the model's other fields
    take the converted values as they are (``tests/unit/test_fast_facts.py`` holds the two
    to the same answer).

    Raises what ``decode_record`` lets through (a time past the platform's range), at the
    same point of the record's fields.
    """
    try:
        # _record_values' lookups and conversions, in its order: a time past the
        # platform's range raises only when no field before it refused the record.
        fields["run_id"], fields["tool_call_id"], fields["tool_name"]
        if fields["status"] not in _STATUSES:
            return False
        fields["request"]
        int(fields["seq"])
        _check_ms(fields["created_at"])
        _check_ms(fields["updated_at"])
        for name in _TIMES_OR_NONE:
            if text := fields.get(name):
                _check_ms(text)
        if attempt := fields.get("attempt"):
            int(attempt)
        if handbacks := fields.get("handbacks"):
            int(handbacks)
        if progress := fields.get("progress"):
            float(progress)
        # The diagnostic refuses nothing (one this code did not write is left out).
    except (KeyError, ValueError):
        return False
    if formats.record_too_new(fields):
        return False
    # As _record_values keeps them: the non-empty text, checked here as the model would.
    evidence = fields.get("evidence_status")
    if evidence and evidence not in _EVIDENCE:
        return False
    code = fields.get("error_code")
    return not code or code in _ERROR_CODES


#: The values of each enum a record's text must name (``Enum(text)`` accepts exactly these).
_STATUSES = frozenset(status.value for status in InvocationStatus)
_EVIDENCE = frozenset(evidence.value for evidence in EvidenceStatus)
_ERROR_CODES = frozenset(code.value for code in ErrorCode)
#: Epoch ms that become a datetime on any platform (from 1970 to the year 3000): a time in
#: this range needs no conversion to be known to convert.
_PLAIN_MS = range(32_503_680_000_000)


def _check_ms(text: str) -> None:
    """Raises what ``_from_ms(text)`` raises, and nothing when it gives a time."""
    if int(text) not in _PLAIN_MS:
        _from_ms(text)


def _record_values(fields: dict[str, str]) -> dict[str, object]:
    """The model's values of a record's fields. Raises KeyError, ValueError."""
    values: dict[str, object] = {
        "run_id": fields["run_id"],
        "tool_call_id": fields["tool_call_id"],
        "tool_name": fields["tool_name"],
        "status": InvocationStatus(fields["status"]),
        "request": fields["request"],
        "seq": int(fields["seq"]),
        "created_at": _from_ms(fields["created_at"]),
        "updated_at": _from_ms(fields["updated_at"]),
    }
    for name in _KEPT_TEXT:
        if name in fields:
            values[name] = fields[name]
    for name in _TEXT_OR_NONE:
        if text := fields.get(name):
            values[name] = text
    for name in _TIMES_OR_NONE:
        if text := fields.get(name):
            values[name] = _from_ms(text)
    if attempt := fields.get("attempt"):
        values["attempt"] = int(attempt)
    if handbacks := fields.get("handbacks"):
        values["handbacks"] = int(handbacks)
    if progress := fields.get("progress"):
        values["progress"] = float(progress)
    if diagnostic := _diagnostic(fields.get("diagnostic")):
        values["diagnostic"] = diagnostic
    return values


def progress_member(member: str, score: float) -> tuple[CanonicalKey | None, int, float]:
    """``run_id:tool_call_id:expires_at_ms`` as written by ``seal.lua``; a member this code
    did not write keeps its place (and is counted) but points to no record."""
    identity, _, expires_ms = member.rpartition(":")
    try:
        key: CanonicalKey | None = CanonicalKey.from_identity(identity)
    except ValidationError:
        key = None
    try:
        expires_at = int(expires_ms) / 1000
    except ValueError:
        expires_at = math.inf
    return key, int(score), expires_at


def progress_entries(
    parsed: list[tuple[CanonicalKey | None, int, float]], found: dict[str, dict[str, str]]
) -> list[ProgressEntry]:
    entries = []
    for key, seq, expires_at in parsed:
        fields = found.get(key.identity) if key is not None else None
        record: CanonicalRecord | None = None
        unreadable = False
        if fields:
            try:
                record = decode_record(fields)
            except StoreError:
                unreadable = True  # excluded, rather than failing the whole run
        entries.append(ProgressEntry(key, seq, expires_at, record, unreadable))
    return entries


def progress_row_member(member: str, score: float) -> tuple[str | None, str | None, int, float]:
    """``progress_member`` without the key model: the run id and tool call id when both are
    safe ids (what the model checks), else ``None`` for both."""
    identity, _, expires_ms = member.rpartition(":")
    run_id, _, tool_call_id = identity.partition(":")
    try:
        expires_at = int(expires_ms) / 1000
    except ValueError:
        expires_at = math.inf
    if is_safe_id(run_id) and is_safe_id(tool_call_id):
        return run_id, tool_call_id, int(score), expires_at
    return None, None, int(score), expires_at


def progress_rows(
    parsed: list[tuple[str | None, str | None, int, float]],
    found: dict[str, dict[str, str]],
    run_id: str,
    in_flight: list[str],
) -> list[ProgressRow]:
    """``progress_entries`` and ``with_in_flight`` as rows: each parsed member with its own
    run's record fields (``found``, by identity), and, in acceptance order among them, each
    call of ``in_flight`` (tool call ids of ``run_id``) whose record is still PROJECTING."""
    rows = [
        ProgressRow(
            member_run,
            tool_call_id,
            seq,
            expires_at,
            found.get(f"{run_id}:{tool_call_id}") or None if member_run == run_id else None,
        )
        for member_run, tool_call_id, seq, expires_at in parsed
    ]
    extra = []
    for tool_call_id in in_flight:
        fields = found.get(f"{run_id}:{tool_call_id}")
        if fields and readable(fields) and fields["status"] == InvocationStatus.PROJECTING:
            extra.append(ProgressRow(run_id, tool_call_id, int(fields["seq"]), math.inf, fields))
    if not extra:
        return rows
    return sorted([*rows, *extra], key=lambda row: row.seq)


def in_flight_ids(
    pending: list[str], parsed: list[tuple[str | None, str | None, int, float]], run_id: str
) -> list[str]:
    """``in_flight_keys`` as tool call ids."""
    indexed = {tool_call_id for member_run, tool_call_id, _, _ in parsed if member_run == run_id}
    found = []
    for member in pending:
        member_run, _, tool_call_id = member.partition(":")
        if (
            member_run == run_id
            and tool_call_id not in indexed
            and is_safe_id(member_run)
            and is_safe_id(tool_call_id)
        ):
            found.append(tool_call_id)
    return found


def in_flight_keys(
    pending: list[str], parsed: list[tuple[CanonicalKey | None, int, float]], run_id: str
) -> list[CanonicalKey]:
    """The run's pending identities (calls accepted, not sealed) that its progress set does
    not hold yet: their records are read too, so an observer counts them as projecting."""
    indexed = {key.identity for key, _, _ in parsed if key is not None}
    found = []
    for member in pending:
        try:
            key = CanonicalKey.from_identity(member)
        except ValidationError:
            continue
        if key.run_id == run_id and key.identity not in indexed:
            found.append(key)
    return found


def with_in_flight(
    entries: list[ProgressEntry], in_flight: list[CanonicalKey], found: dict[str, dict[str, str]]
) -> list[ProgressEntry]:
    """``entries`` and, in acceptance order among them, each call of ``in_flight`` whose
    record is still PROJECTING (one sealed since is indexed and will be seen next time)."""
    extra = []
    for key in in_flight:
        fields = found.get(key.identity)
        if not fields:
            continue
        try:
            record = decode_record(fields)
        except StoreError:
            continue
        if record.status is InvocationStatus.PROJECTING:
            extra.append(ProgressEntry(key, record.seq, math.inf, record))
    if not extra:
        return entries
    return sorted([*entries, *extra], key=lambda entry: entry.seq)


def parse_progress(
    members: list[tuple[str, float]], run_id: str
) -> tuple[list[tuple[CanonicalKey | None, int, float]], list[CanonicalKey]]:
    """A run's progress members parsed, and the keys of its own records to read: another
    run's identity is excluded unread."""
    parsed = [progress_member(member, score) for member, score in members]
    own = [key for key, _, _ in parsed if key is not None and key.run_id == run_id]
    return parsed, own


def found_fields(
    own: list[CanonicalKey], replies: list[list[str | None]]
) -> dict[str, dict[str, str]]:
    """HMGET replies of ``PROGRESS_FIELDS`` by identity, empty fields left out."""
    return {
        k.identity: {f: v for f, v in zip(PROGRESS_FIELDS, values, strict=True) if v}
        for k, values in zip(own, replies, strict=True)
    }


def create_args(
    key: CanonicalKey, terms: CreateTerms, *, ttl_ms: int, index: bool
) -> tuple[list[str], list[str | int]]:
    """KEYS and ARGV of ``create.lua`` (durations: the script reads the time from Redis).

    ``index``: the script also bumps the run in the pending-runs index and the runs index
    (same round trip). Only on a single-node Redis: on a cluster those keys are in other hash
    slots than the run's.
    """
    deadline = terms["deadline"]
    max_run_calls = terms["max_run_calls"]
    max_tool_calls = terms["max_tool_calls"]
    argv: list[str | int] = [
        key.run_id,
        key.tool_call_id,
        terms["tool_name"],
        terms["request"],
        max(int(terms["max_pending_s"] * 1000), 0),
        "" if deadline is None else ms(deadline),
        ttl_ms,
        -1 if max_run_calls is None else max_run_calls,
        -1 if max_tool_calls is None else max_tool_calls,
        max(int(terms["reap_grace_s"] * 1000), 0),
        key.identity,
        request_sha256(terms["tool_name"], terms["request"]),
    ]
    run_keys = [keys.record_key(key), keys.budget_key(key.run_id), keys.pending_key(key.run_id)]
    if index:
        run_keys += [keys.PENDING_RUNS, keys.RUNS]
    return run_keys, argv


def create_result(created: Any, detail: Any) -> CreateResult:
    """``create.lua``'s reply as a result."""
    if int(created) == ScriptCode.OK:
        return CreateResult(CreateStatus.CREATED, seq=int(detail))
    return CreateResult(CreateStatus(detail))


def seal_args(
    key: CanonicalKey, terms: SealTerms, *, now_ms: int, index: bool
) -> tuple[list[str], list[str | int]]:
    """KEYS and ARGV of ``seal.lua``; the seal is announced on the run's sealed channel.

    ``index``: the seal that empties the run's pending set also drops the run from the
    pending-runs index (single-node Redis only, as ``create_args``)."""
    error_code = terms.get("error_code")
    diagnostic = terms.get("diagnostic")
    status = InvocationStatus.ERROR if error_code is not None else InvocationStatus.READY
    run_keys = [
        keys.record_key(key),
        keys.progress_key(key.run_id),
        keys.pending_key(key.run_id),
        keys.budget_key(key.run_id),
    ]
    if index:
        run_keys.append(keys.PENDING_RUNS)
    argv: list[str | int] = [
        status.value,
        terms["evidence_status"].value,
        terms.get("agent_result") or "",
        terms.get("scope") or "",
        error_code.value if error_code is not None else "",
        now_ms,
        key.identity,
        diagnostic.model_dump_json() if diagnostic is not None else "",
        keys.sealed_channel(key.run_id),
        key.tool_call_id,
    ]
    created_at = terms.get("created_at")
    attempt = terms.get("attempt")
    due_at = terms.get("due_at")
    argv += [
        "" if created_at is None else exact_ms(created_at),
        "" if attempt is None else attempt,
        "" if due_at is None else ms(due_at),
        terms.get("projector_version") or "",
        terms.get("raw") or "",
    ]
    return run_keys, argv


def seal_result(reply: Any) -> WriteStatus:
    """``seal.lua``'s reply as a write status."""
    return seal_reply(reply)[0]


def seal_reply(reply: Any) -> tuple[WriteStatus, str | None, int | None]:
    """``seal.lua``'s reply: the write status, and the call's tool and current attempt when it
    is sealed (now, or already: ``NOT_PROJECTING``)."""
    if isinstance(reply, list):
        attempt = int(reply[2]) if len(reply) > 2 else None
        return write_status(reply[0]), str(reply[1]) or None, attempt
    if int(reply) == ScriptCode.INVALID:
        # The combination broke the lifecycle table: a bug in the caller, not bad input.
        raise ValueError("invalid seal: status, evidence status and error code disagree")
    return write_status(reply), None, None
