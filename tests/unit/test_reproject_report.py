"""What a person reads of a re-projection job: the summary by tool and version, the table per
tool, the first evidence flips, and the line when the workers ran another version."""

from __future__ import annotations

import json

from rich.console import Console

from boundary import EvidenceStatus, ObservedFact, ObservedFacts
from boundary.reprojection import (
    facts_diff,
    failures_why,
    readable_changes,
    summary,
    version_text,
)
from boundary.reprojection.diff import tool_total, why_total
from boundary.store.redis_jobs import Job
from tasks.cli.reproject_job import Flips, progress_text, tools_table, version_mismatch
from tests.support.reprojection_tools import make_registry


def test_the_summary_names_versions_flips_and_failures_by_tool() -> None:
    totals = {
        "runs": 2,
        "records": 5,
        "failed": 1,
        "flip:EVIDENCE_FOUND -> NO_EVIDENCE": 1,
        tool_total("lookup", "records"): 5,
        tool_total("lookup", "records_changed"): 3,
        tool_total("lookup", "version:1>2"): 4,
        tool_total("lookup", "version:3>2"): 1,
        tool_total("lookup", "failed:KeyError"): 1,
        tool_total("lookup", "flip:EVIDENCE_FOUND -> NO_EVIDENCE"): 1,
    }
    got = summary(totals)
    assert got["versions"] == {"lookup": "v1, v3 -> v2"}
    row = got["tools"]["lookup"]
    assert (row["records"], row["records_changed"]) == (5, 3)
    assert row["failed"] == {"KeyError": 1}
    assert row["evidence_flips"] == {"EVIDENCE_FOUND -> NO_EVIDENCE": 1}
    assert got["evidence_flips_by_direction"] == {"EVIDENCE_FOUND -> NO_EVIDENCE": 1}
    # A job of 0.5.0 counted fields under "changed"
    assert summary({"changed": 4})["fields_changed"] == 4
    assert version_text(["1"], [""]) == "v1 -> none"

    console = Console(record=True, width=120)
    console.print(tools_table(got))
    text = console.export_text()
    assert "lookup" in text and "v1, v3 -> v2" in text and "KeyError 1" in text


def test_a_changed_result_is_a_json_patch_and_full_adds_both_objects() -> None:
    def facts(result: object) -> ObservedFacts:
        fact = ObservedFact(
            tool_call_id="c", tool_name="t", evidence_status=EvidenceStatus.EVIDENCE_FOUND,
            result=result, scope=None,
        )  # fmt: skip
        return ObservedFacts(run_id="r", facts=(fact,))

    old, new = facts({"a": 1, "b": [1, 2]}), facts({"a": 2, "b": [1, 2]})
    line = {"run_id": "r", "diff": facts_diff(old, new, {}, max_failed=10)}
    # (the workers keep both objects; the line is made readable where it is shown)
    kept = line["diff"]["changed"][0]
    assert kept["before"] == {"a": 1, "b": [1, 2]} and kept["after"] == {"a": 2, "b": [1, 2]}
    change = readable_changes(json.loads(json.dumps(line)))["diff"]["changed"][0]
    assert change == {
        "tool_call_id": "c",
        "field": "result",
        "patch": [{"op": "replace", "path": "/a", "value": 2}],
    }
    full = readable_changes(line, full=True)["diff"]["changed"][0]
    assert full["before"] == {"a": 1, "b": [1, 2]} and full["after"] == {"a": 2, "b": [1, 2]}
    assert full["patch"] == change["patch"]


def test_the_first_flips_are_listed_up_to_the_limit() -> None:
    flips = Flips(limit=2)
    for n in range(3):
        change = {"tool_call_id": f"c{n}", "field": "evidence_status",
                  "before": "EVIDENCE_FOUND", "after": "NO_EVIDENCE"}  # fmt: skip
        flips.add(json.dumps({"run_id": f"r{n}", "diff": {"changed": [change]}}))
    flips.add("not json")
    assert flips.shown == [
        "r0/c0: EVIDENCE_FOUND -> NO_EVIDENCE",
        "r1/c1: EVIDENCE_FOUND -> NO_EVIDENCE",
    ]


def test_workers_running_another_version_are_named_in_one_line() -> None:
    totals = summary({tool_total("lookup", "version:1>1"): 3})
    line = version_mismatch(totals, make_registry("2"))
    assert line is not None and "lookup v1 (here v2)" in line
    assert version_mismatch(totals, make_registry("1")) is None


def test_failures_are_totalled_by_tool_code_and_frame_for_the_job_s_one_warning_each() -> None:
    frame = "KeyError raised at tools.py:12 in project"
    totals = {
        why_total("lookup", "PROJECTION_FAILED", frame): 7,
        why_total("lookup", "PROJECTION_FAILED", "ValueError raised at tools.py:30 in f"): 2,
        why_total("fetch", "PROJECTION_TIMEOUT", "no detail"): 1,
        tool_total("lookup", "failed:KeyError"): 7,
        "failed": 10,
    }
    assert failures_why(totals) == [
        ("fetch", "PROJECTION_TIMEOUT", "no detail", 1),
        ("lookup", "PROJECTION_FAILED", frame, 7),
        ("lookup", "PROJECTION_FAILED", "ValueError raised at tools.py:30 in f", 2),
    ]
    # (the summary's rows by tool are as before: failures by type only)
    assert summary(totals)["tools"]["lookup"]["failed"] == {"KeyError": 7}


def paced_job(chunks: int, records: int, updated_at_s: float, rate: list[float] | None) -> Job:
    return Job(
        job_id="j", spec={"rate": rate}, state="running", cancel=False, lanes=2,
        lanes_ended=0, cursors={0: "a", 1: "b"}, ended=frozenset(), created_at_ms=0,
        updated_at_ms=int(updated_at_s * 1000), finished_at_ms=None, chunks=chunks,
        totals={"runs": 30, "records": records},
    )  # fmt: skip


def test_progress_says_n_of_total_and_when_a_paced_job_s_next_chunk_starts() -> None:
    at = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
    plain = progress_text(paced_job(3, 60, at, None), 120, started=0.0, now_s=at)
    assert plain.startswith("reprocessing: 30 of 120 runs (25%)") and "paced" not in plain
    # Chunks of 20 records, 2 lanes, 10 records a minute: a lane's next chunk 240 s after
    # the last checkpoint
    job = paced_job(3, 60, at, [10, 60])
    waiting = progress_text(job, 120, started=0.0, now_s=at + 5)
    assert waiting.endswith("; paced by --rate 10/60: next chunk at about 08:04:00 UTC")
    due = progress_text(job, 120, started=0.0, now_s=at + 241)
    assert due.endswith("; paced by --rate 10/60: next chunk due now")
