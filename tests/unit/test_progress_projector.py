"""The run progress projector, pure: progress entries and records built by hand, no Redis."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from boundary import (
    CanonicalKey,
    CanonicalRecord,
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    ObservedFact,
    RunProgressProjector,
    canonical_json,
    utf8_size,
)
from boundary.progress import CROSS_RUN, ERROR, EXPIRED, MISSING, PROJECTING
from boundary.store import ProgressEntry

RUN = "run-1"
NOW = 1_900_000_000.0
CREATED = datetime.fromtimestamp(NOW - 10, tz=UTC)
RAW_SECRET = "raw-only-sk-live-SECRET123"


def record(
    tool_call_id: str,
    *,
    status: InvocationStatus = InvocationStatus.READY,
    evidence: EvidenceStatus | None = EvidenceStatus.EVIDENCE_FOUND,
    result: Any = None,
    scope: Any = None,
    run_id: str = RUN,
    seq: int = 1,
    error_code: ErrorCode | None = None,
) -> CanonicalRecord:
    return CanonicalRecord(
        run_id=run_id,
        tool_call_id=tool_call_id,
        tool_name="search",
        status=status,
        evidence_status=evidence,
        request='{"query":"q"}',
        raw=canonical_json({"secret": RAW_SECRET}),
        agent_result=None if result is None else canonical_json(result),
        scope=None if scope is None else canonical_json(scope),
        error_code=error_code,
        seq=seq,
        created_at=CREATED,
        updated_at=CREATED,
    )


def entry(
    tool_call_id: str,
    seq: int,
    rec: CanonicalRecord | None,
    *,
    run_id: str = RUN,
    expires_at: float = NOW + 600,
) -> ProgressEntry:
    key = CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)
    return ProgressEntry(key=key, seq=seq, expires_at=expires_at, record=rec)


def ready(tool_call_id: str, seq: int, result: Any = None, **fields: Any) -> ProgressEntry:
    result = {"n": seq} if result is None else result
    return entry(tool_call_id, seq, record(tool_call_id, seq=seq, result=result, **fields))


def fact_size(fact: ObservedFact) -> int:
    return utf8_size(canonical_json(fact.model_dump(mode="json")))


def test_completed_calls_are_projected() -> None:
    # Given a run that ended after three READY calls, indexed out of order
    entries = [
        ready("c3", 3, {"hits": ["c"]}),
        ready("c1", 1, {"hits": ["a"]}, scope={"query": "a"}),
        ready("c2", 2, {"hits": []}, evidence=EvidenceStatus.NO_EVIDENCE, scope={"query": "b"}),
    ]
    # When the progress is projected
    facts = RunProgressProjector().project(RUN, entries, now=NOW)
    # Then each record becomes a bounded fact, in execution (acceptance) order
    assert [f.tool_call_id for f in facts.facts] == ["c1", "c2", "c3"]
    assert facts.facts[0].result == {"hits": ["a"]}
    assert facts.facts[0].scope == {"query": "a"}
    assert facts.facts[0].tool_name == "search"
    assert facts.excluded == {}
    assert facts.omitted == 0
    # And the raw responses stay out of the facts
    assert RAW_SECRET not in facts.model_dump_json()


def test_no_evidence_fact_stays_a_scoped_negative_observation() -> None:
    # Given a READY NO_EVIDENCE record with its scope
    entries = [
        ready("c1", 1, {"hits": []}, evidence=EvidenceStatus.NO_EVIDENCE, scope={"svc": "api"})
    ]
    # When the progress is projected
    facts = RunProgressProjector().project(RUN, entries, now=NOW)
    # Then it is a negative fact with its scope, never counted as evidence
    (fact,) = facts.facts
    assert fact.evidence_status is EvidenceStatus.NO_EVIDENCE
    assert fact.negative is True
    assert fact.scope == {"svc": "api"}
    assert facts.evidence_count == 0


def test_indexed_identity_is_invalid() -> None:
    # Given indexed identities that are missing, expired, cross-run, PROJECTING and ERROR
    entries = [
        entry("missing", 1, None, expires_at=NOW + 1),
        entry("expired", 2, None, expires_at=NOW - 1),
        entry("expired_now", 3, None, expires_at=NOW),
        ready("foreign_key", 4, run_id="run-2"),
        entry("foreign_record", 5, record("foreign_record", run_id="run-2", seq=5)),
        entry("swapped", 6, record("other_call", seq=6, result={"n": 6})),
        entry("running", 7, record("running", status=InvocationStatus.PROJECTING, evidence=None)),
        entry(
            "failed",
            8,
            record(
                "failed",
                status=InvocationStatus.ERROR,
                evidence=EvidenceStatus.ERROR,
                error_code=ErrorCode.PROJECTION_FAILED,
            ),
        ),
        # A READY record with an ERROR evidence status is not a valid READY record.
        entry("ready_but_error", 9, record("ready_but_error", evidence=EvidenceStatus.ERROR)),
        ready("good", 10),
    ]
    # When the progress is projected
    facts = RunProgressProjector().project(RUN, entries, now=NOW)
    # Then each invalid identity is excluded and counted by reason; only the READY one remains
    assert [f.tool_call_id for f in facts.facts] == ["good"]
    assert facts.excluded == {MISSING: 1, EXPIRED: 2, CROSS_RUN: 3, PROJECTING: 1, ERROR: 2}
    assert facts.omitted == 0
    assert facts.evidence_count == 1


def test_exclusion_reason_of_each_kind() -> None:
    # Given the projector
    projector = RunProgressProjector()
    # When single entries are classified
    # Then each gets its reason, and a valid READY entry none
    assert projector.exclusion(RUN, ready("c", 1), NOW) is None
    assert projector.exclusion(RUN, entry("c", 1, None, expires_at=NOW + 5), NOW) == MISSING
    assert projector.exclusion(RUN, entry("c", 1, None, expires_at=NOW - 5), NOW) == EXPIRED
    assert projector.exclusion("run-2", ready("c", 1), NOW) == CROSS_RUN


def test_fact_count_bound_omits_and_counts_the_rest() -> None:
    # Given five READY calls and a bound of two facts
    entries = [ready(f"c{i}", i) for i in range(1, 6)]
    # When the progress is projected
    facts = RunProgressProjector(max_facts=2).project(RUN, entries, now=NOW)
    # Then the first two are kept and three are counted as omitted, not silently dropped
    assert [f.tool_call_id for f in facts.facts] == ["c1", "c2"]
    assert facts.omitted == 3


def test_fact_byte_bound_keeps_an_ordered_prefix() -> None:
    # Given a small fact, then a big one, then small ones, and a byte bound fitting two smalls
    entries = [ready("c1", 1), ready("c2", 2, {"text": "x" * 500}), ready("c3", 3), ready("c4", 4)]
    small = fact_size(
        ObservedFact(
            tool_call_id="c1",
            tool_name="search",
            evidence_status=EvidenceStatus.EVIDENCE_FOUND,
            result={"n": 1},
        )
    )
    # When the progress is projected
    facts = RunProgressProjector(max_facts_bytes=2 * small).project(RUN, entries, now=NOW)
    # Then facts stop at the first one that does not fit: later small ones are cut too
    assert [f.tool_call_id for f in facts.facts] == ["c1"]
    assert facts.omitted == 3
    assert sum(fact_size(f) for f in facts.facts) <= 2 * small


def test_fact_byte_bound_is_inclusive() -> None:
    # Given two facts and a byte bound of exactly their size
    entries = [ready("c1", 1), ready("c2", 2)]
    total = sum(fact_size(f) for f in RunProgressProjector().project(RUN, entries, now=NOW).facts)
    # When the progress is projected with that bound, and with one byte less
    exact = RunProgressProjector(max_facts_bytes=total).project(RUN, entries, now=NOW)
    short = RunProgressProjector(max_facts_bytes=total - 1).project(RUN, entries, now=NOW)
    # Then the first keeps both and the second omits one
    assert (len(exact.facts), exact.omitted) == (2, 0)
    assert (len(short.facts), short.omitted) == (1, 1)


def test_excluded_entries_do_not_use_the_bounds() -> None:
    # Given an ERROR record before two READY ones, and a bound of two facts
    failed = record(
        "failed",
        status=InvocationStatus.ERROR,
        evidence=EvidenceStatus.ERROR,
        error_code=ErrorCode.TOOL_EXECUTION_FAILED,
    )
    entries = [entry("failed", 1, failed), ready("c2", 2), ready("c3", 3)]
    # When the progress is projected
    facts = RunProgressProjector(max_facts=2).project(RUN, entries, now=NOW)
    # Then both READY calls are facts, and the ERROR one is excluded, not omitted
    assert [f.tool_call_id for f in facts.facts] == ["c2", "c3"]
    assert facts.excluded == {ERROR: 1}
    assert facts.omitted == 0


def test_no_progress_gives_no_facts() -> None:
    # Given a run with nothing indexed
    # When it is projected, even with zero bounds
    facts = RunProgressProjector(max_facts=0, max_facts_bytes=0).project(RUN, [], now=NOW)
    # Then there are no facts and nothing excluded or omitted
    assert facts.facts == ()
    assert facts.excluded == {}
    assert facts.omitted == 0
    assert facts.run_id == RUN


def test_fact_results_are_the_stored_agent_results_parsed() -> None:
    # Given a READY record whose agent result is canonical JSON text
    rec = record("c1", result={"b": [1, 2], "a": "é"})
    assert rec.agent_result == '{"a":"é","b":[1,2]}'
    # When it is projected
    facts = RunProgressProjector().project(RUN, [entry("c1", 1, rec)], now=NOW)
    # Then the fact holds exactly that result, parsed
    assert facts.facts[0].result == json.loads(rec.agent_result)


def test_project_json_is_the_projection_as_json_whatever_the_entries() -> None:
    # Given entries of every kind: facts, each exclusion, a result that is not JSON, NaN and
    # an infinity in results (JSON this code never writes), non-ASCII text, and facts that
    # the count and byte bounds cut
    not_json = record("c-bad", seq=4, result=None)
    nan = record("c-nan", seq=5, result=None)
    inf = record("c-inf", seq=6, result=None)
    entries = [
        ready("c1", 1, {"text": "café ✓", "n": [1, 2.5, None, True]}),
        ready("c2", 2, scope={"q": "x"}, evidence=EvidenceStatus.NO_EVIDENCE),
        ready("c3", 3, status=InvocationStatus.PROJECTING),
        entry("c-bad", 4, not_json.model_copy(update={"agent_result": "{not json"})),
        entry("c-nan", 5, nan.model_copy(update={"agent_result": '{"x": NaN}'})),
        entry("c-inf", 6, inf.model_copy(update={"agent_result": "[1e999, -Infinity]"})),
        entry("c-gone", 7, None, expires_at=NOW - 5),
        entry("c-missing", 8, None),
        ready("c9", 9, run_id="run-2"),
        ready("c10", 10, status=InvocationStatus.ERROR, evidence=None),
        *[ready(f"c{n}", n, {"pad": "p" * 40}) for n in range(11, 20)],
    ]
    for bounds in ({}, {"max_facts": 4}, {"max_facts_bytes": 600}, {"max_facts_bytes": 0}):
        projector = RunProgressProjector(**bounds)

        # When the run is projected as JSON and as models
        as_json = projector.project_json(RUN, entries, now=NOW)
        as_models = projector.project(RUN, entries, now=NOW).model_dump(mode="json")

        # Then both say the same, in the same order, to the byte
        assert canonical_json(as_json) == canonical_json(as_models), bounds
        assert list(as_json) == list(as_models)
