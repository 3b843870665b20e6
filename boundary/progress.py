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
from boundary.store.base import ProgressEntry

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
