"""A re-projection's diff of a run's facts, its selection of records and a job's pacing."""

from __future__ import annotations

from datetime import UTC, datetime

from boundary import EvidenceStatus, InvocationStatus, ObservedFact, ObservedFacts
from boundary.models import CanonicalRecord
from boundary.reprojection import Selection, facts_diff, summary
from tasks.worker.jobs import pace_s


def fact(call_id: str, evidence: EvidenceStatus, result: object) -> ObservedFact:
    return ObservedFact(
        tool_call_id=call_id, tool_name="t", evidence_status=evidence, result=result, scope=None
    )


FOUND, NONE = EvidenceStatus.EVIDENCE_FOUND, EvidenceStatus.NO_EVIDENCE


def test_the_diff_names_facts_added_removed_and_fields_changed() -> None:
    old = ObservedFacts(run_id="r", facts=(fact("a", FOUND, 1), fact("b", FOUND, 2)))
    new = ObservedFacts(run_id="r", facts=(fact("a", NONE, 1), fact("c", FOUND, 3)))

    diff = facts_diff(old, new, {"b": "PROJECTION_FAILED"}, max_failed=10)

    assert [f["tool_call_id"] for f in diff["added"]] == ["c"]
    assert [f["tool_call_id"] for f in diff["removed"]] == ["b"]
    assert diff["changed"] == [
        {
            "tool_call_id": "a",
            "field": "evidence_status",
            "before": "EVIDENCE_FOUND",
            "after": "NO_EVIDENCE",
        }
    ]
    assert diff["failed"] == {"b": "PROJECTION_FAILED"}


def test_failures_past_the_bound_are_counted_not_listed() -> None:
    facts = ObservedFacts(run_id="r")
    failed = {f"c{n}": "RESULT_TOO_LARGE" for n in range(5)}
    diff = facts_diff(facts, facts, failed, max_failed=2)
    assert list(diff["failed"]) == ["c0", "c1"]
    assert diff["failed_omitted"] == 3


def test_a_selection_matches_tool_status_and_acceptance_window() -> None:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    record = CanonicalRecord(
        run_id="r",
        tool_call_id="c",
        tool_name="search",
        status=InvocationStatus.READY,
        evidence_status=FOUND,
        request="{}",
        seq=1,
        created_at=at,
        updated_at=at,
    )
    ms = int(at.timestamp() * 1000)
    assert Selection(all=True).matches(record)
    assert Selection(tools=("search",), statuses=("READY",)).matches(record)
    assert not Selection(tools=("other",)).matches(record)
    assert not Selection(statuses=("ERROR",)).matches(record)
    assert Selection(since_ms=ms, until_ms=ms).matches(record)
    assert not Selection(since_ms=ms + 1).matches(record)
    assert not Selection(until_ms=ms - 1).matches(record)


def test_a_rate_paces_each_lane_by_its_share() -> None:
    # 10 records per 2 s over 2 lanes: each lane 5 per 2 s, so 5 records wait 2 s
    assert pace_s({"rate": [10, 2]}, lanes=2, records=5) == 2.0
    assert pace_s({"rate": None}, lanes=2, records=5) == 0.0
    assert pace_s({"rate": [10, 2]}, lanes=1, records=0) == 0.0


def test_the_summary_lists_every_kind_and_failures_by_code() -> None:
    got = summary({"runs": 3, "failed": 2, "failed:PROJECTION_FAILED": 2})
    assert got["runs"] == 3 and got["records_changed"] == 0
    assert got["failed_by_code"] == {"PROJECTION_FAILED": 2}
