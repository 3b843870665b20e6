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
from collections.abc import Iterator
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
        used_bytes = 0
        omitted = 0
        for record in self._accepted(run_id, entries, now, excluded):
            try:
                fact = _fact(record)
            except ValueError:
                # A result that is not JSON was not written by this code: not evidence.
                excluded[ERROR] += 1
                continue
            size = utf8_size(canonical_json(fact.model_dump(mode="json")))
            # Facts stay a prefix in acceptance order: once one does not fit, the rest are cut.
            if omitted or len(facts) >= self.max_facts or used_bytes + size > self.max_facts_bytes:
                omitted += 1
                continue
            facts.append(fact)
            used_bytes += size
        return ObservedFacts(
            run_id=run_id, facts=tuple(facts), excluded=dict(excluded), omitted=omitted
        )

    def project_json(
        self, run_id: str, entries: list[ProgressEntry], now: float | None = None
    ) -> dict[str, Any]:
        """``project(...).model_dump(mode="json")``, the same facts and bounds, built without
        a model per fact (a batch of runs' lines is mostly this loop)."""
        now = time.time() if now is None else now
        excluded: Counter[str] = Counter()
        facts: list[dict[str, Any]] = []
        used_bytes = 0
        omitted = 0
        for record in self._accepted(run_id, entries, now, excluded):
            assert record.evidence_status is not None
            try:
                fact: dict[str, Any] = {
                    "tool_call_id": record.tool_call_id,
                    "tool_name": record.tool_name,
                    "evidence_status": record.evidence_status.value,
                    "result": json.loads(record.agent_result) if record.agent_result else None,
                    "scope": json.loads(record.scope) if record.scope else None,
                    "projector_version": record.projector_version,
                }
            except ValueError:
                excluded[ERROR] += 1
                continue
            try:
                text = canonical_json(fact)
            except ValueError:
                # NaN or an infinity (JSON this code never writes): as the model writes them.
                fact = _fact(record).model_dump(mode="json")
                text = canonical_json(fact)
            size = utf8_size(text)
            if omitted or len(facts) >= self.max_facts or used_bytes + size > self.max_facts_bytes:
                omitted += 1
                continue
            facts.append(fact)
            used_bytes += size
        return {"run_id": run_id, "facts": facts, "excluded": dict(excluded), "omitted": omitted}

    def project_rows(self, run_id: str, rows: list[ProgressRow], now: float | None = None) -> str:
        """The JSON text of ``project_json``'s line, from rows (``progress_rows_many``): the
        same facts, exclusions and bounds, with no model per record (``codec.readable``
        answers as decoding would). A fact is its canonical JSON, the text its size is
        counted on (its keys sorted: the same object as ``project_json``'s)."""
        now = time.time() if now is None else now
        excluded: Counter[str] = Counter()
        facts: list[str] = []
        used_bytes = 0
        omitted = 0
        for row in sorted(rows, key=_row_seq):
            reason = _row_exclusion(run_id, row, now)
            if reason is not None:
                excluded[reason] += 1
                continue
            fields = row.fields
            assert fields is not None
            try:
                agent_result = fields.get("agent_result")
                scope = fields.get("scope")
                fact: dict[str, Any] = {
                    "tool_call_id": fields["tool_call_id"],
                    "tool_name": fields["tool_name"],
                    "evidence_status": fields["evidence_status"],
                    "result": json.loads(agent_result) if agent_result else None,
                    "scope": json.loads(scope) if scope else None,
                    "projector_version": fields.get("projector_version"),
                }
            except ValueError:
                excluded[ERROR] += 1
                continue
            try:
                text = canonical_json(fact)
            except ValueError:
                # NaN or an infinity: as the model writes them (``project_json``).
                text = canonical_json(_fact(decode_record(fields)).model_dump(mode="json"))
            size = utf8_size(text)
            if omitted or len(facts) >= self.max_facts or used_bytes + size > self.max_facts_bytes:
                omitted += 1
                continue
            facts.append(text)
            used_bytes += size
        return (
            f'{{"run_id":{_dumps(run_id)},"facts":[{",".join(facts)}],'
            f'"excluded":{_dumps(dict(excluded))},"omitted":{omitted}}}'
        )


def _row_seq(row: ProgressRow) -> int:
    return row.seq


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
    if status == InvocationStatus.PROJECTING:
        return PROJECTING
    if status != InvocationStatus.READY or fields.get("evidence_status") not in READY_EVIDENCE:
        return ERROR
    return None


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
