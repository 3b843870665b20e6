"""A batch of runs' facts is built from the records' fields as read, without a model per record
(``codec.readable``, ``codec.progress_row_member``, ``RunProgressProjector.project_rows``):
each must answer exactly as the model path does (``decode_record``, ``progress_member``,
``project_json``), on records this code wrote and on records it did not."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundary import RunProgressProjector, StoreError
from boundary.limits import canonical_json
from boundary.store import ProgressEntry
from boundary.store.base import ProgressRow
from boundary.store.codec import (
    PROGRESS_FIELDS,
    decode_record,
    progress_member,
    progress_row_member,
    readable,
)

RUN = "run-1"
NOW = 1_900_000_000.0


def fields_of(tool_call_id: str, seq: int, /, **changes: str | None) -> dict[str, str]:
    """A READY record's non-empty fields as a read gives them; ``None`` drops a field."""
    fields = {
        "run_id": RUN,
        "tool_call_id": tool_call_id,
        "tool_name": "search",
        "status": "READY",
        "evidence_status": "EVIDENCE_FOUND",
        "request": '{"query":"q"}',
        "agent_result": json.dumps({"n": seq, "text": "é ✓"}, ensure_ascii=False),
        "scope": '{"q":"x"}',
        "seq": str(seq),
        "created_at": "1899999990000",
        "updated_at": "1899999991000",
        "request_sha256": "ab" * 32,
        "attempt": "1",
        "projector_version": "1",
    }
    for name, value in changes.items():
        if value is None:
            fields.pop(name, None)
        else:
            fields[name] = value
    # A read leaves empty fields out.
    return {name: value for name, value in fields.items() if value}


def decoded(fields: dict[str, str]) -> str:
    """What ``decode_record`` makes of ``fields``: a record, a refusal, or what it raised."""
    try:
        decode_record(fields)
    except StoreError:
        return "refused"
    except Exception as exc:  # what decode_record lets through, readable must too
        return type(exc).__name__
    return "record"


def checked(fields: dict[str, str]) -> str:
    try:
        return "record" if readable(fields) else "refused"
    except Exception as exc:
        return type(exc).__name__


#: Values a hand-written record could hold in any field.
ODD_VALUES = [
    "",
    "x",
    "0",
    "1",
    "-1",
    " 12",
    "1_000",
    "١٢",
    "1.5",
    "1e3",
    "nan",
    "inf",
    "-inf",
    "99999999999999999999999",
    "-99999999999999999",
    # Around the times readable need not convert (below the year 3000) and past the year 9999.
    "32503679999999",
    "32503680000000",
    "253402300799999",
    "253402300800000",
    "READY",
    "ERROR",
    "PROJECTING",
    "ready",
    "EVIDENCE_FOUND",
    "NO_EVIDENCE",
    "WORKER_LOST",
    "PROJECTION_FAILED",
    "{}",
    "null",
    '{"not":"a diagnostic"}',
    '{"n":NaN}',
    "{not json",
    "run-2",
]


@pytest.mark.parametrize("name", PROGRESS_FIELDS)
@pytest.mark.parametrize("value", [*ODD_VALUES, None])
def test_readable_answers_as_decoding_for_any_one_odd_field(name: str, value: str | None) -> None:
    fields = fields_of("c1", 1, **{name: value})

    assert checked(fields) == decoded(fields)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(PROGRESS_FIELDS),
        st.one_of(st.sampled_from(ODD_VALUES), st.text(max_size=6), st.none()),
        max_size=5,
    )
)
def test_readable_answers_as_decoding_for_any_odd_fields(changes: dict[str, str | None]) -> None:
    fields = fields_of("c1", 1, **changes)

    assert checked(fields) == decoded(fields)


MEMBERS = [
    "run-1:c1:1900000600000",
    "run-1:c1:not-a-time",
    "run-1:c1:",
    "run-1:c1",
    "garbage",
    "",
    ":",
    "::",
    "run-1:c{9}:123",
    "run-1:c 9:123",
    "run-1:c:9:123",
    "run{1}:c9:123",
    "run-1:c9\n:123",
    "run-1\n:c9:123",
    "run-1:" + "c" * 128 + ":123",
    "run-1:" + "c" * 129 + ":123",
    "_run:c9:123",
    "run-1:é:123",
    "run-2:x1:-5",
]


@pytest.mark.parametrize("member", MEMBERS)
@pytest.mark.parametrize("score", [0.0, 7.0, 7.9, -3.0])
def test_a_row_member_parses_as_the_key_model_does(member: str, score: float) -> None:
    key, seq, expires_at = progress_member(member, score)
    run_id, tool_call_id, row_seq, row_expires_at = progress_row_member(member, score)

    assert (run_id, tool_call_id) == ((key.run_id, key.tool_call_id) if key else (None, None))
    assert row_seq == seq
    assert row_expires_at == expires_at or (math.isinf(expires_at) and math.isinf(row_expires_at))


@given(st.text(alphabet="run-1c:{}_. é\n9x", max_size=20))
def test_any_member_parses_as_the_key_model_does(member: str) -> None:
    key, _, _ = progress_member(member, 1.0)
    run_id, tool_call_id, _, _ = progress_row_member(member, 1.0)

    assert (run_id, tool_call_id) == ((key.run_id, key.tool_call_id) if key else (None, None))


def both(rows: list[ProgressRow], projector: RunProgressProjector) -> tuple[Any, Any]:
    """``project_rows`` (parsed) and ``project_json`` of the same rows as entries; or the
    type of what each raised (a time past the platform's range fails both the same way).

    All three ways share the bounding step, and each is held to the others here: the text of
    ``project_rows`` is, byte for byte, ``project_json``'s line with each fact as its
    canonical JSON, and ``project_json`` is ``project(...).model_dump(mode="json")``."""

    def model() -> dict[str, Any]:
        entries = []
        for row in rows:
            key = None
            if row.run_id is not None:
                key, _, _ = progress_member(f"{row.run_id}:{row.tool_call_id}:0", 0)
            record, unreadable = None, False
            if row.fields and row.run_id == RUN:
                try:
                    record = decode_record(row.fields)
                except StoreError:
                    unreadable = True
            entries.append(ProgressEntry(key, row.seq, row.expires_at, record, unreadable))
        line = projector.project_json(RUN, entries, now=NOW)
        assert projector.project(RUN, entries, now=NOW).model_dump(mode="json") == line
        return line

    def fast() -> str:
        return projector.project_rows(RUN, rows, now=NOW)

    text, line = outcome(fast), outcome(model)
    if isinstance(line, str):
        return text, line
    assert text == line_text(line)
    return json.loads(text), line


def line_text(line: dict[str, Any]) -> str:
    """A line of ``project_json`` as ``project_rows`` writes it: each fact its canonical
    JSON, the line's own keys in their order."""
    facts = ",".join(canonical_json(fact) for fact in line["facts"])
    run_id, excluded = (
        json.dumps(line[name], ensure_ascii=False, separators=(",", ":"))
        for name in ("run_id", "excluded")
    )
    return (
        f'{{"run_id":{run_id},"facts":[{facts}],"excluded":{excluded},"omitted":{line["omitted"]}}}'
    )


def outcome(build: Any) -> Any:
    try:
        return build()
    except (OverflowError, OSError) as exc:
        return type(exc).__name__


def ready_row(n: int, /, **changes: str | None) -> ProgressRow:
    return ProgressRow(RUN, f"c{n}", n, NOW + 600, fields_of(f"c{n}", n, **changes))


def test_rows_give_the_same_line_as_entries_for_every_kind_of_record() -> None:
    # Given one row of each kind, out of acceptance order
    rows = [
        ready_row(9),
        ready_row(2, evidence_status="NO_EVIDENCE", scope='{"q":"none"}'),
        ready_row(3, status="ERROR", evidence_status="ERROR", error_code="WORKER_LOST"),
        ready_row(4, status="PROJECTING", evidence_status=None, agent_result=None),
        ready_row(5, status="DONE"),
        ready_row(6, agent_result="{not json"),
        ready_row(7, run_id="run-2"),
        ready_row(8, agent_result='{"b": 1, "a": [1.0, 2e3, "\\u00e9"], "a": 3}'),
        ready_row(10, agent_result='{"x":NaN}'),
        ready_row(11, projector_version=None, scope=None, agent_result=None),
        ready_row(12, evidence_status="MAYBE"),
        ready_row(13, error_code="NOT_A_CODE"),
        ready_row(14, diagnostic="{broken"),
        ProgressRow(RUN, "c15", 15, NOW - 5, None),  # expired
        ProgressRow(RUN, "c16", 16, NOW + 5, None),  # missing
        ProgressRow("run-2", "x1", 17, NOW + 5, None),  # another run's identity
        ProgressRow(None, None, 18, math.inf, None),  # not an identity
        ready_row(1),
    ]

    # When they are projected both ways
    fast, model = both(rows, RunProgressProjector())

    # Then the lines are the same object, and hold every reason
    assert fast == model
    assert set(fast["excluded"]) == {"error", "projecting", "cross_run", "expired", "missing"}
    facts = ["c1", "c2", "c8", "c9", "c10", "c11", "c14"]
    assert [fact["tool_call_id"] for fact in fast["facts"]] == facts


@pytest.mark.parametrize(("max_facts", "max_bytes"), [(3, 100_000), (50, 300), (50, 0), (0, 10)])
def test_rows_cut_facts_at_the_same_bounds_as_entries(max_facts: int, max_bytes: int) -> None:
    rows = [ready_row(n) for n in range(1, 11)]
    projector = RunProgressProjector(max_facts=max_facts, max_facts_bytes=max_bytes)

    fast, model = both(rows, projector)

    assert fast == model
    assert fast["omitted"] == 10 - len(fast["facts"]) > 0


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 30),
            st.dictionaries(
                st.sampled_from(PROGRESS_FIELDS),
                st.one_of(st.sampled_from(ODD_VALUES), st.none()),
                max_size=2,
            ),
        ),
        max_size=12,
    ),
    st.integers(0, 8),
    st.integers(0, 2000),
)
def test_any_rows_give_the_same_line_as_entries(
    calls: list[tuple[int, dict[str, str | None]]], max_facts: int, max_bytes: int
) -> None:
    rows = [ready_row(n, **changes) for n, changes in calls]
    projector = RunProgressProjector(max_facts=max_facts, max_facts_bytes=max_bytes)

    fast, model = both(rows, projector)

    assert fast == model


def test_a_time_past_the_platforms_range_fails_both_ways_alike() -> None:
    rows = [ready_row(1), ready_row(2, created_at="99999999999999999999999")]

    fast, model = both(rows, RunProgressProjector())

    assert fast == model
    assert isinstance(fast, str)  # the type of what both raised
