"""``record_fits``: the record-size check both steps make per call, settled by a bound when the
record is far under the limit; it must answer exactly as the serialized size does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from boundary.diagnostics import Diagnostic, Stage
from boundary.errors import ErrorCode
from boundary.models import CanonicalRecord, EvidenceStatus, InvocationStatus
from boundary.record_size import _size_bound, record_fits, record_size

NOW = datetime(2026, 12, 4, 12, 0, 0, 123456, tzinfo=UTC)


def _record(text: str, *, diagnostic: bool = False, **fields: object) -> CanonicalRecord:
    values: dict[str, object] = {
        "run_id": "run-1",
        "tool_call_id": "call-1",
        "tool_name": "search",
        "status": InvocationStatus.PROJECTING,
        "request": text,
        "raw": text,
        "seq": 2**40,
        "created_at": NOW,
        "updated_at": NOW,
        "deadline": NOW + timedelta(days=3650),
        "started_at": NOW,
        "heartbeat_at": NOW,
        "progress": 1 / 3,
        "progress_message": text,
        "attempt": 3,
    }
    if diagnostic:
        values["diagnostic"] = Diagnostic(
            tool_name="search",
            error_code=ErrorCode.PROJECTION_FAILED,
            stage=Stage.PROJECT,
            note="n" * 40,
        )
    values.update(fields)
    return CanonicalRecord.model_validate(values)


#: Text whose JSON is longest per character: control characters (6 bytes each), quotes and
#: backslashes (2), characters of 3 and 4 UTF-8 bytes.
ADVERSE = st.text(
    alphabet=st.sampled_from(["\x1f", "\x00", '"', "\\", "\u20ac", "\U0001f600", "a"])
)


@settings(max_examples=200, deadline=None)
@given(text=ADVERSE, result=ADVERSE, limit=st.integers(min_value=0, max_value=4000))
def test_it_answers_as_the_serialized_size_does(text: str, result: str, limit: int) -> None:
    record = _record(text, evidence_status=EvidenceStatus.EVIDENCE_FOUND)
    exact = record_size(record, agent_result=result, scope=None)
    bound = _size_bound(record, {"agent_result": result, "scope": None})
    # The bound is a bound
    assert bound is not None and bound >= exact
    # And the answer is the exact size's, on both sides of the limit
    assert record_fits(record, limit, agent_result=result, scope=None) is (exact <= limit)


def test_a_record_near_the_limit_is_measured_exactly() -> None:
    record = _record("x" * 100)
    exact = record_size(record, raw="y" * 100)
    # Under the bound's slack, the exact size decides both ways
    assert record_fits(record, exact, raw="y" * 100)
    assert not record_fits(record, exact - 1, raw="y" * 100)


def test_a_record_with_a_diagnostic_is_measured_exactly() -> None:
    record = _record("x", diagnostic=True, status=InvocationStatus.ERROR)
    assert _size_bound(record, {}) is None
    exact = record_size(record)
    assert record_fits(record, exact) and not record_fits(record, exact - 1)


def test_the_bound_holds_for_text_of_the_longest_json() -> None:
    # 6 bytes of JSON per character: the bound's own worst case, with little else to hide in
    worst = "\x1f" * 2000
    record = _record(worst)
    exact = record_size(record, agent_result=worst)
    bound = _size_bound(record, {"agent_result": worst})
    assert bound is not None and bound >= exact


def test_a_change_that_is_not_text_is_bounded_field_by_field() -> None:
    # Not a text field, or not text given to one: the bound still holds, and the answer is
    # still the exact size's.
    record = _record("x" * 50)
    for changes in ({"seq": 2**60, "raw": "y" * 10}, {"agent_result": ["z"] * 3}):
        exact = record_size(record, **changes)
        bound = _size_bound(record, changes)
        assert bound is None or bound >= exact
        assert record_fits(record, exact, **changes)
        assert not record_fits(record, exact - 1, **changes)


def test_every_enum_name_and_empty_field_stays_under_the_bound() -> None:
    # The longest names of each enum field, every optional field empty or set
    for status in InvocationStatus:
        for code in ErrorCode:
            record = _record("", status=status, error_code=code, raw=None, progress=None)
            exact = record_size(record, agent_result="", scope=None)
            bound = _size_bound(record, {"agent_result": "", "scope": None})
            assert bound is not None and bound >= exact
