"""The handover between a call's two steps in one process: taken once, bounded in entries,
age and raw size."""

from __future__ import annotations

from datetime import UTC, datetime

from boundary import CanonicalKey, CanonicalRecord, InvocationStatus
from boundary.handover import Handover


def _record(tool_call_id: str, raw: str | None = '{"ok":true}') -> CanonicalRecord:
    now = datetime(2026, 12, 3, tzinfo=UTC)
    return CanonicalRecord(
        run_id="run-1",
        tool_call_id=tool_call_id,
        tool_name="search",
        status=InvocationStatus.PROJECTING,
        request="{}",
        raw=raw,
        seq=1,
        created_at=now,
        updated_at=now,
    )


def _key(tool_call_id: str) -> CanonicalKey:
    return CanonicalKey(run_id="run-1", tool_call_id=tool_call_id)


def test_a_record_left_is_taken_once() -> None:
    handover = Handover()
    record = _record("c1")
    handover.put(record)
    assert handover.take(_key("c2")) is None
    assert handover.take(_key("c1")) is record
    assert handover.take(_key("c1")) is None
    assert len(handover) == 0


def test_the_oldest_entries_go_first_past_the_bound() -> None:
    handover = Handover(max_entries=2)
    for n in range(3):
        handover.put(_record(f"c{n}"))
    assert len(handover) == 2
    assert handover.take(_key("c0")) is None
    assert handover.take(_key("c1")) is not None
    assert handover.take(_key("c2")) is not None


def test_an_entry_older_than_its_age_bound_is_not_used() -> None:
    handover = Handover(max_age_s=0.0)
    handover.put(_record("c1"))
    assert handover.take(_key("c1")) is None
    assert len(handover) == 0


def test_large_or_missing_raw_responses_are_not_kept() -> None:
    handover = Handover(max_raw_chars=8)
    handover.put(_record("big", raw='{"a":"0123456789"}'))
    handover.put(_record("none", raw=None))
    assert len(handover) == 0
