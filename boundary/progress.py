"""The run progress projector: a run's READY records become bounded observed facts.

The tracker is the store's progress set: ordered canonical identities only, no raw data and
no results. Facts are read through the canonical store, never from a second copy.

This lives in ``boundary`` (not ``projectors``) because ``ToolBoundary.observe`` uses it and
imports point ``tasks -> projectors -> boundary``; ``projectors`` re-exports it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any

from boundary.limits import DEFAULT_MAX_FACTS, DEFAULT_MAX_FACTS_BYTES, canonical_json, utf8_size
from boundary.models import (
    READY_EVIDENCE,
    CanonicalRecord,
    InvocationStatus,
    ObservedFact,
    ObservedFacts,
)
from boundary.store.base import ProgressEntry, ProgressRow
from boundary.store.codec import decode_record, readable

#: Reasons an indexed identity is excluded from the facts.
MISSING = "missing"
EXPIRED = "expired"
CROSS_RUN = "cross_run"
PROJECTING = "projecting"
ERROR = "error"
EXCLUSION_REASONS = (MISSING, EXPIRED, CROSS_RUN, PROJECTING, ERROR)


class RunProgressProjector:
    """Accepts only READY records owned by the run, in acceptance order, within bounds.

    Args:
        max_facts: at most this many facts.
        max_facts_bytes: at most this many UTF-8 bytes of facts (canonical JSON, summed).
    """

    def __init__(
        self, *, max_facts: int = DEFAULT_MAX_FACTS, max_facts_bytes: int = DEFAULT_MAX_FACTS_BYTES
    ) -> None:
        self.max_facts = max_facts
        self.max_facts_bytes = max_facts_bytes

    def exclusion(self, run_id: str, entry: ProgressEntry, now: float) -> str | None:
        """Why ``entry`` cannot become a fact of ``run_id``, or ``None`` when it can."""
        record = entry.record
        if entry.key is None:
            return MISSING  # not an identity: it points to no record
        if entry.key.run_id != run_id:
            return CROSS_RUN
        if entry.unreadable:
            return ERROR
        if record is None:
            return EXPIRED if now >= entry.expires_at else MISSING
        if record.run_id != run_id or record.tool_call_id != entry.key.tool_call_id:
            return CROSS_RUN
        if record.status is InvocationStatus.PROJECTING:
            return PROJECTING
        if record.status is not InvocationStatus.READY or record.evidence_status not in (
            READY_EVIDENCE
        ):
            return ERROR
        return None

    def _accepted(
        self, run_id: str, entries: list[ProgressEntry], now: float, excluded: Counter[str]
    ) -> Iterator[CanonicalRecord]:
        """The records of ``entries`` that may become facts, in acceptance order; the others
        counted in ``excluded`` by reason."""
        for entry in sorted(entries, key=lambda e: e.seq):
            reason = self.exclusion(run_id, entry, now)
            if reason is not None:
                excluded[reason] += 1
                continue
            assert entry.record is not None and entry.record.evidence_status is not None
            yield entry.record

    def project(
        self, run_id: str, entries: list[ProgressEntry], now: float | None = None
    ) -> ObservedFacts:
        now = time.time() if now is None else now
        excluded: Counter[str] = Counter()
        facts: list[ObservedFact] = []
        bounds = _Bounds(self.max_facts, self.max_facts_bytes)
        for record in self._accepted(run_id, entries, now, excluded):
            try:
                fact = _fact(record)
            except ValueError:
                # A result that is not JSON was not written by this code: not evidence.
                excluded[ERROR] += 1
                continue
            if bounds.fit(fact.model_dump(mode="json"), _record_fact, record):
                facts.append(fact)
        return ObservedFacts(
            run_id=run_id, facts=tuple(facts), excluded=dict(excluded), omitted=bounds.omitted
        )

    def project_json(
        self, run_id: str, entries: list[ProgressEntry], now: float | None = None
    ) -> dict[str, Any]:
        """``project(...).model_dump(mode="json")``, the same facts and bounds, built without
        a model per fact (the model path of a batch of runs' lines, for a store that has no
        ``progress_rows_many``)."""
        now = time.time() if now is None else now
        excluded: Counter[str] = Counter()
        facts: list[dict[str, Any]] = []
        bounds = _Bounds(self.max_facts, self.max_facts_bytes)
        for record in self._accepted(run_id, entries, now, excluded):
            assert record.evidence_status is not None
            try:
                fact = _fact_of(
                    tool_call_id=record.tool_call_id,
                    tool_name=record.tool_name,
                    evidence_status=record.evidence_status.value,
                    agent_result=record.agent_result,
                    scope=record.scope,
                    projector_version=record.projector_version,
                )
            except ValueError:
                excluded[ERROR] += 1
                continue
            if kept := bounds.fit(fact, _record_fact, record):
                facts.append(kept[0])
        return {
            "run_id": run_id,
            "facts": facts,
            "excluded": dict(excluded),
            "omitted": bounds.omitted,
        }

    def project_rows(self, run_id: str, rows: list[ProgressRow], now: float | None = None) -> str:
        """The JSON text of ``project_json``'s line, from rows (``progress_rows_many``): the
        same facts, exclusions and bounds, with no model per record (``codec.readable``
        answers as decoding would). A fact is its canonical JSON, the text its size is
        counted on (its keys sorted: the same object as ``project_json``'s)."""
        now = time.time() if now is None else now
        excluded: Counter[str] = Counter()
        facts: list[str] = []
        bounds = _Bounds(self.max_facts, self.max_facts_bytes)
        for row in sorted(rows, key=_row_seq):
            reason = _row_exclusion(run_id, row, now)
            if reason is not None:
                excluded[reason] += 1
                continue
            fields = row.fields
            assert fields is not None
            get = fields.get
            try:
                fact = _fact_of(
                    tool_call_id=fields["tool_call_id"],
                    tool_name=fields["tool_name"],
                    evidence_status=fields["evidence_status"],
                    agent_result=get("agent_result"),
                    scope=get("scope"),
                    projector_version=get("projector_version"),
                )
            except ValueError:
                excluded[ERROR] += 1
                continue
            if kept := bounds.fit(fact, _fields_fact, fields):
                facts.append(kept[1])
        return (
            f'{{"run_id":{_dumps(run_id)},"facts":[{",".join(facts)}],'
            f'"excluded":{_dumps(dict(excluded))},"omitted":{bounds.omitted}}}'
        )


class _Bounds:
    """The bounding step of a run's facts, the same for each way of building them: a fact's
    canonical JSON (with the model's form as the fallback), the count and byte bounds
    (``max_facts``, ``max_facts_bytes``), and ``omitted``. Facts stay a prefix in acceptance
    order: once one does not fit, the rest are cut."""

    __slots__ = ("kept", "max_bytes", "max_facts", "omitted", "used_bytes")

    def __init__(self, max_facts: int, max_bytes: int) -> None:
        self.max_facts = max_facts
        self.max_bytes = max_bytes
        self.kept = 0
        self.used_bytes = 0
        self.omitted = 0

    def fit(
        self, fact: dict[str, Any], as_model: Callable[[_Source], dict[str, Any]], source: _Source
    ) -> tuple[dict[str, Any], str] | None:
        """The fact and its canonical JSON when it is kept (and counted); ``None`` when it is
        cut (counted in ``omitted``; its JSON is not written once the count is reached).

        ``fact`` is as ``ObservedFact.model_dump(mode="json")`` gives it when its result and
        scope hold no NaN or infinity (JSON this code never writes, which ``json.loads``
        reads); when they do, the fact is as the model writes it: ``as_model(source)``.
        """
        if self.omitted or self.kept >= self.max_facts:
            self.omitted += 1
            return None
        try:
            text = _data_json(fact)
        except ValueError:
            fact = as_model(source)
            text = canonical_json(fact)
        # One byte per character for ASCII (isascii() reads a flag: no copy).
        size = len(text) if text.isascii() else utf8_size(text)
        if self.used_bytes + size > self.max_bytes:
            self.omitted += 1
            return None
        self.kept += 1
        self.used_bytes += size
        return fact, text


def _fact_of(
    *,
    tool_call_id: str,
    tool_name: str,
    evidence_status: str,
    agent_result: str | None,
    scope: str | None,
    projector_version: str | None,
) -> dict[str, Any]:
    """A fact as ``ObservedFact.model_dump(mode="json")`` gives it, from a record's values.

    Raises ValueError: the result or the scope is not JSON.
    """
    return {
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "evidence_status": evidence_status,
        "result": json.loads(agent_result) if agent_result else None,
        "scope": json.loads(scope) if scope else None,
        "projector_version": projector_version,
    }


def _record_fact(record: _Source) -> dict[str, Any]:
    assert isinstance(record, CanonicalRecord)
    return _fact(record).model_dump(mode="json")


def _fields_fact(fields: _Source) -> dict[str, Any]:
    assert isinstance(fields, dict)
    return _fact(decode_record(fields)).model_dump(mode="json")


#: What a fact is written from, for the model's form of it: a record, or its fields as read.
_Source = CanonicalRecord | dict[str, str]


_row_seq = attrgetter("seq")


def _row_exclusion(run_id: str, row: ProgressRow, now: float) -> str | None:
    """``RunProgressProjector.exclusion`` of a row: the same reasons in the same order."""
    if row.run_id is None:
        return MISSING
    if row.run_id != run_id:
        return CROSS_RUN
    fields = row.fields
    if fields is None:
        return EXPIRED if now >= row.expires_at else MISSING
    if not readable(fields):
        return ERROR
    if fields["run_id"] != run_id or fields["tool_call_id"] != row.tool_call_id:
        return CROSS_RUN
    status = fields["status"]
    if status == _PROJECTING:
        return PROJECTING
    if status != _READY or fields.get("evidence_status") not in _READY_EVIDENCE:
        return ERROR
    return None


#: The values ``_row_exclusion`` compares a record's text with (plain strings: an enum
#: member is looked up on its class at each use).
_PROJECTING = InvocationStatus.PROJECTING.value
_READY = InvocationStatus.READY.value
_READY_EVIDENCE = frozenset(evidence.value for evidence in READY_EVIDENCE)


def _canonical_data_json() -> Callable[[Any], str]:
    """``canonical_json`` for data that ``json.loads`` gave (and strings): the same text, and
    ValueError for NaN or an infinity, from one C encoder made once, where
    ``JSONEncoder.encode`` makes one per call (and looks for cycles, which parsed JSON
    cannot hold). Without the C encoder, ``canonical_json`` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return canonical_json
    encode = make(
        None,  # no cycle markers
        json.JSONEncoder().default,  # a value that is not JSON: TypeError, as canonical_json
        json.encoder.encode_basestring,  # non-ASCII kept
        None,  # no indent
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )

    def data_json(value: Any) -> str:
        return "".join(encode(value, 0))

    return data_json


_data_json = _canonical_data_json()


def _dumps(value: Any) -> str:
    """JSON as ``project_runs`` writes its lines: compact, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _fact(record: CanonicalRecord) -> ObservedFact:
    """Raises ValueError: the result or the scope is not JSON."""
    assert record.evidence_status is not None
    return ObservedFact(
        tool_call_id=record.tool_call_id,
        tool_name=record.tool_name,
        evidence_status=record.evidence_status,
        result=json.loads(record.agent_result) if record.agent_result else None,
        scope=json.loads(record.scope) if record.scope else None,
        projector_version=record.projector_version,
    )
