"""One clock: reap times and deadlines are measured on Redis's clock (TIME inside the
scripts), so a submitter, worker or reaper whose own clock is off moves nothing.

Each "process" here is a boundary and store with a fake clock of its own, on the same Redis.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import redis

from boundary import (
    CanonicalKey,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
)
from boundary.store import keys
from tests.support.helpers import RUN_ID, TOOL, FakeTool, register

#: How far each fake clock is off, seconds.
SKEWS = {"2 h behind": -7200.0, "90 s ahead": 90.0, "2 h ahead": 7200.0, "on time": 0.0}
MAX_PENDING_S = 30.0
GRACE_S = 5.0


class _Parked:
    """A dispatcher that accepts calls and never runs them: the record stays PROJECTING."""

    def dispatch(self, key: CanonicalKey) -> None:
        pass

    def wait(self, key: CanonicalKey, timeout: float | None) -> None:
        return None


def _skewed(redis_client: redis.Redis, skew_s: float) -> tuple[ToolBoundary, RedisCanonicalStore]:
    def clock() -> float:
        return time.time() + skew_s

    registry = ToolRegistry()
    register(registry, FakeTool())
    store = RedisCanonicalStore(client=redis_client, ttl_s=600, clock=clock)
    boundary = ToolBoundary(
        store=store,
        registry=registry,
        dispatcher=_Parked(),
        max_pending_s=MAX_PENDING_S,
        reap_grace_s=GRACE_S,
        clock=clock,
    )
    return boundary, store


def _redis_now(redis_client: redis.Redis) -> float:
    seconds, micros = redis_client.time()
    return seconds + micros / 1e6


@pytest.mark.parametrize("skew", list(SKEWS))
def test_a_submitters_clock_does_not_move_the_reap_time(
    redis_client: redis.Redis, skew: str
) -> None:
    # Given a submitter whose clock is off
    boundary, _ = _skewed(redis_client, SKEWS[skew])
    run = RunContext(run_id=RUN_ID, authorized_tools=frozenset({TOOL}))
    call = ToolCallEnvelope(run_id=RUN_ID, tool_call_id="c1", tool_name=TOOL, arguments={})
    # When it submits a call
    before = _redis_now(redis_client)
    assert boundary.submit(call, run).accepted
    after = _redis_now(redis_client)
    # Then the reap time is max_pending + grace after Redis's now, whatever the clock said
    reap_at = redis_client.zscore(keys.pending_key(RUN_ID), f"{RUN_ID}:c1") / 1000
    assert before + MAX_PENDING_S + GRACE_S - 0.01 <= reap_at <= after + MAX_PENDING_S + GRACE_S
    # And the record's times are Redis's too
    record = boundary.store.get(CanonicalKey(run_id=RUN_ID, tool_call_id="c1"))
    assert before - 0.01 <= record.created_at.timestamp() <= after + 0.01


def test_reapers_with_any_clock_agree_on_what_is_due(redis_client: redis.Redis) -> None:
    # Given calls submitted by processes with clocks hours apart, one due soon
    run = RunContext(run_id=RUN_ID, authorized_tools=frozenset({TOOL}))
    for n, skew in enumerate(SKEWS.values()):
        boundary, _ = _skewed(redis_client, skew)
        call = ToolCallEnvelope(run_id=RUN_ID, tool_call_id=f"c{n}", tool_name=TOOL, arguments={})
        assert boundary.submit(call, run).accepted
    soon, _ = _skewed(redis_client, -7200)
    soon.max_pending_s, soon.reap_grace_s = 0.5, 0.0
    due_call = ToolCallEnvelope(run_id=RUN_ID, tool_call_id="soon", tool_name=TOOL, arguments={})
    assert soon.submit(due_call, run).accepted
    time.sleep(1.0)
    # When reapers whose clocks are off look for due calls
    for skew in SKEWS.values():
        _, store = _skewed(redis_client, skew)
        # Then each finds exactly the call that is due on Redis's clock: no live call early
        assert store.due_pending() == [CanonicalKey(run_id=RUN_ID, tool_call_id="soon")]


def test_a_worker_clock_ahead_does_not_end_a_call_before_its_deadline(
    redis_client: redis.Redis,
) -> None:
    from boundary.steps import ExecuteResult, execute_step

    # Given a call whose run deadline is a minute away (on the real clock)
    registry = ToolRegistry()
    register(registry, FakeTool())
    store = RedisCanonicalStore(client=redis_client, ttl_s=600, clock=lambda: time.time() + 7200)
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=_Parked(), max_pending_s=MAX_PENDING_S
    )
    deadline = datetime.now(UTC) + timedelta(minutes=1)
    run = RunContext(run_id=RUN_ID, authorized_tools=frozenset({TOOL}), deadline=deadline)
    call = ToolCallEnvelope(run_id=RUN_ID, tool_call_id="c1", tool_name=TOOL, arguments={})
    assert boundary.submit(call, run).accepted
    # When a worker whose clock is 2 h ahead executes it
    key = CanonicalKey(run_id=RUN_ID, tool_call_id="c1")
    # Then the tool runs (the deadline is judged on Redis's clock)
    assert execute_step(store, registry, key) is ExecuteResult.STORED
    assert store.get(key).status is InvocationStatus.PROJECTING
