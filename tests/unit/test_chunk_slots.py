"""The cap of re-projection chunks, without services: its settings, a lane's holder id, and
what ``jobs show`` says of a job's lanes at the cap."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from boundary import CanonicalKey
from boundary.flow import is_reserved
from boundary.store.flow import FlowStanding, FlowState, ToolLimits
from tasks.settings import Settings
from tasks.worker.chunk_slots import (
    REPROJECT_SLOTS,
    entry_limits,
    lane_key,
    lane_of,
    slots_text,
    slots_view,
)


def test_a_lane_s_holder_key_names_its_job_and_lane() -> None:
    key = lane_key("rp-20261205-abc", 7)
    assert key.identity == "rp-20261205-abc:lane-7"
    assert lane_of(key) == ("rp-20261205-abc", 7)
    assert lane_of(CanonicalKey(run_id="r", tool_call_id="c1")) is None
    assert lane_of(CanonicalKey(run_id="r", tool_call_id="lane-x")) is None


def test_the_cap_s_name_is_reserved() -> None:
    assert is_reserved(REPROJECT_SLOTS)
    assert not is_reserved("search_docs")


def test_jobs_show_says_how_many_lanes_hold_and_wait() -> None:
    states = {
        0: FlowState(FlowStanding.HOLDS, attempt=3, started=True),
        1: FlowState(FlowStanding.WAITS, attempt=2, ahead=4),
        2: FlowState(FlowStanding.WAITS, attempt=1, ahead=1),
        3: FlowState(FlowStanding.NONE),
    }
    view = slots_view(states)
    assert view == {"cap": REPROJECT_SLOTS, "holding": 1, "waiting": 2, "ahead": 1}
    assert slots_text(view) == (
        "1 lane(s) holding a slot, 2 waiting for a slot of tool_boundary.reproject (1 ahead)"
    )
    idle = slots_view({0: FlowState(FlowStanding.NONE)})
    assert slots_text(idle) == "0 lane(s) holding a slot"


def test_the_cap_is_2_chunks_on_a_30_s_lease_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOL_BOUNDARY_REPROJECT_CONCURRENCY", raising=False)
    monkeypatch.delenv("TOOL_BOUNDARY_REPROJECT_LEASE_S", raising=False)
    assert entry_limits(Settings()) == ToolLimits(concurrency=2, lease_s=30.0)
    monkeypatch.setenv("TOOL_BOUNDARY_REPROJECT_CONCURRENCY", "5")
    monkeypatch.setenv("TOOL_BOUNDARY_REPROJECT_LEASE_S", "4.5")
    assert entry_limits(Settings()) == ToolLimits(concurrency=5, lease_s=4.5)


@pytest.mark.parametrize("field", ["reproject_concurrency", "reproject_lease_s"])
def test_a_cap_or_lease_of_0_is_refused(field: str) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: 0})
