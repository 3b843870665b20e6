"""Heartbeats, starts and retries on a real Redis: the scripts' rules (attempts, sealed is
final, TTL kept, the reap time moved), coalescing measured in store writes, hostile input
stored bounded, and the call context inside a tool run by ``InProcessDispatcher``."""

from __future__ import annotations

import math
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import redis

from boundary import (
    CallInfo,
    ErrorCode,
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    RetryPolicy,
    ToolBoundary,
    ToolRegistry,
    ToolSpec,
    current_call,
    heartbeat,
)
from boundary.call_context import MAX_PROGRESS_MESSAGE_BYTES
from boundary.store import ClaimStatus, WriteStatus, keys
from tests.support.helpers import (
    RUN_ID,
    TOOL,
    FakeProjector,
    create_projecting,
    create_terms,
    envelope,
    key_of,
    make_run,
    no_evidence,
    wait_until,
)


class CountingStore(RedisCanonicalStore):
    """The real store, counting the heartbeat writes it is asked for."""

    heartbeats = 0

    def heartbeat(self, key: Any, **terms: Any) -> WriteStatus:
        self.heartbeats += 1
        return super().heartbeat(key, **terms)


def boundary_with(
    redis_client: redis.Redis, executor: Any, **options: Any
) -> tuple[ToolBoundary, CountingStore]:
    store = CountingStore(client=redis_client, ttl_s=600)
    registry = ToolRegistry()
    projector = FakeProjector(no_evidence({"q": 1}))
    registry.register(
        ToolSpec(name=TOOL, executor=executor, projector=projector, read_only=True, **options)
    )
    dispatcher = InProcessDispatcher(store, registry)
    return ToolBoundary(store=store, registry=registry, dispatcher=dispatcher), store


def test_a_thousand_heartbeats_cost_one_store_write_per_interval(
    redis_client: redis.Redis,
) -> None:
    # Given a tool that heartbeats 1,000 times in a tight loop
    def tight(arguments: dict[str, Any]) -> dict[str, Any]:
        for i in range(1000):
            heartbeat(progress=i / 1000, message=f"item {i}")
        return {"hits": []}

    boundary, store = boundary_with(redis_client, tight)
    started = time.monotonic()
    outcome = boundary.invoke(envelope(), make_run(), timeout=30)
    took = time.monotonic() - started
    assert outcome.status is InvocationStatus.READY, outcome
    # Then the store was written once per started second of the tool, not 1,000 times
    assert 1 <= store.heartbeats <= 1 + math.ceil(took), (store.heartbeats, took)


def test_hostile_heartbeats_never_raise_and_leave_bounded_values_in_the_record(
    redis_client: redis.Redis,
) -> None:
    inspected, raised = threading.Event(), []

    def hostile(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            heartbeat(progress=0.4, message="ok so far")
            for bad in ({"progress": math.nan}, {"message": "m" * 1_000_000}, {"message": 7}):
                time.sleep(1.05)  # past the interval: each is written
                heartbeat(**bad)  # type: ignore[arg-type]
        except Exception as exc:  # the test fails on anything raised into the tool
            raised.append(exc)
        inspected.wait(10)
        return {"hits": []}

    boundary, store = boundary_with(redis_client, hostile)
    assert boundary.submit(envelope(), make_run()).accepted
    wait_until(lambda: store.heartbeats >= 4, "four heartbeats", 30, every=0.05)
    record = store.get(key_of("call_1"))
    inspected.set()
    assert raised == []
    assert record is not None
    # NaN and a non-string left the good values as they were; 1 MB became 200 bytes
    assert record.progress == 0.4
    assert record.progress_message == "m" * MAX_PROGRESS_MESSAGE_BYTES
    assert boundary.outcome(RUN_ID, "call_1", timeout=30).status is InvocationStatus.READY


def test_current_call_inside_a_tool_names_the_call_and_its_time_left(
    redis_client: redis.Redis,
) -> None:
    seen: list[CallInfo | None] = []

    def introspect(arguments: dict[str, Any]) -> dict[str, Any]:
        seen.append(current_call())
        return {"hits": []}

    boundary, _ = boundary_with(redis_client, introspect, timeout_s=20)
    assert boundary.invoke(envelope(), make_run(), timeout=30).status is InvocationStatus.READY
    (info,) = seen
    assert info is not None
    assert (info.run_id, info.tool_call_id, info.tool_name, info.attempt) == (
        RUN_ID,
        "call_1",
        TOOL,
        1,
    )
    assert 0 < info.time_left_s <= 20
    assert current_call() is None


def test_a_timed_out_attempt_is_retried_in_process_under_the_same_record(
    redis_client: redis.Redis,
) -> None:
    attempts: list[int] = []

    def slow_once(arguments: dict[str, Any]) -> dict[str, Any]:
        info = current_call()
        assert info is not None
        attempts.append(info.attempt)
        while info.attempt == 1:
            heartbeat()
            time.sleep(0.02)
        return {"hits": []}

    boundary, store = boundary_with(
        redis_client, slow_once, timeout_s=0.3, retry=RetryPolicy(max_attempts=2, backoff_s=0)
    )
    outcome = boundary.invoke(envelope(), make_run(), timeout=30)
    assert outcome.status is InvocationStatus.READY, outcome
    assert attempts == [1, 2]
    record = store.get(key_of("call_1"))
    assert record is not None and record.attempt == 2
    assert redis_client.hget(keys.budget_key(RUN_ID), "calls") == "1"


def test_without_a_retry_policy_a_timed_out_attempt_is_sealed_tool_timeout(
    redis_client: redis.Redis,
) -> None:
    def slow(arguments: dict[str, Any]) -> dict[str, Any]:
        while True:  # not a wait: a tool that never ends by itself (its heartbeat ends it)
            heartbeat()
            time.sleep(0.02)

    boundary, store = boundary_with(redis_client, slow, timeout_s=0.3)
    outcome = boundary.invoke(envelope(), make_run(), timeout=30)
    assert outcome.error_code is ErrorCode.TOOL_TIMEOUT
    record = store.get(key_of("call_1"))
    assert record is not None and record.attempt == 1


# --- the scripts ----------------------------------------------------------------------------


def pttl(redis_client: redis.Redis, key: Any) -> int:
    return int(redis_client.pttl(keys.record_key(key)))


def reap_at(redis_client: redis.Redis, key: Any) -> float:
    score = redis_client.zscore(keys.pending_key(key.run_id), key.identity)
    assert score is not None
    return float(score)


def test_a_claim_stamps_the_attempt_and_moves_the_reap_time_of_a_heartbeating_tool(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    key = create_projecting(store)
    before_ttl, before_reap = pttl(redis_client, key), reap_at(redis_client, key)
    claim = store.claim(key, attempt=1, heartbeat_timeouts={"other": 9.0, TOOL: 2.0})
    assert claim.status is ClaimStatus.STARTED
    # the claim's record is the stored one, read in the same round trip
    record = store.get(key)
    assert claim.record == record
    assert record is not None and record.started_at is not None and record.attempt == 1
    assert claim.now == record.started_at
    now_ms = record.started_at.timestamp() * 1000
    assert reap_at(redis_client, key) == pytest.approx(now_ms + 2000, abs=2)
    assert reap_at(redis_client, key) < before_reap
    assert pttl(redis_client, key) <= before_ttl  # never refreshed
    # a stale message of another attempt starts nothing
    assert store.claim(key, attempt=2, heartbeat_timeouts={}).status is ClaimStatus.SUPERSEDED
    # a kept raw response is projected, a sealed call left alone, a missing one not created
    store.store_raw(key, "{}")
    assert store.claim(key, attempt=1, heartbeat_timeouts={}).status is ClaimStatus.STORED
    store.seal_error(key, ErrorCode.CANCELLED)
    assert store.claim(key, attempt=1, heartbeat_timeouts={}).status is ClaimStatus.SEALED
    gone = key_of("gone")
    assert store.claim(gone, attempt=1, heartbeat_timeouts={}).status is ClaimStatus.MISSING
    assert not redis_client.exists(keys.record_key(gone))


def test_a_claim_past_the_deadline_starts_nothing(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    key = key_of("late")
    past = store.now() - timedelta(seconds=1)
    assert store.create(key, **create_terms(deadline=past)).seq is not None
    claim = store.claim(key, attempt=1, heartbeat_timeouts={TOOL: 2.0})
    assert claim.status is ClaimStatus.PAST_DEADLINE
    record = store.get(key)
    assert record is not None and record.started_at is None


def test_heartbeats_keep_the_ttl_follow_the_attempt_and_stop_once_sealed(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    key = create_projecting(store)
    store.claim(key, attempt=1, heartbeat_timeouts={TOOL: 5.0})
    before_ttl = pttl(redis_client, key)
    beat = {"attempt": 1, "progress": 0.25, "message": "a quarter", "heartbeat_timeout_s": 5.0}
    assert store.heartbeat(key, **beat) is WriteStatus.OK
    record = store.get(key)
    assert record is not None
    assert (record.progress, record.progress_message) == (0.25, "a quarter")
    assert record.heartbeat_at is not None
    assert reap_at(redis_client, key) == pytest.approx(
        record.heartbeat_at.timestamp() * 1000 + 5000, abs=2
    )
    assert pttl(redis_client, key) <= before_ttl
    # another attempt's heartbeat is refused
    assert store.heartbeat(key, **(beat | {"attempt": 2})) is WriteStatus.SUPERSEDED
    # once sealed, a heartbeat is refused and writes nothing; missing is missing
    assert store.seal_error(key, ErrorCode.CANCELLED) is WriteStatus.OK
    sealed = store.get(key)
    assert store.heartbeat(key, **beat) is WriteStatus.NOT_PROJECTING
    assert store.get(key) == sealed
    assert store.heartbeat(key_of("nope"), **beat) is WriteStatus.MISSING
    assert not redis_client.exists(keys.record_key(key_of("nope")))


def test_retry_hands_the_record_to_the_next_attempt_once(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    key = create_projecting(store)
    store.claim(key, attempt=1, heartbeat_timeouts={TOOL: 5.0})
    store.heartbeat(key, attempt=1, progress=0.5, message="half", heartbeat_timeout_s=5.0)
    before_ttl = pttl(redis_client, key)
    moved = store.retry_attempt(key, attempt=1, reap_after_s=30, reap_grace_s=1)
    assert moved == 2
    record = store.get(key)
    assert record is not None and record.attempt == 2
    assert (record.started_at, record.heartbeat_at, record.progress) == (None, None, None)
    assert redis_client.hget(keys.record_key(key), "retries") == "1"
    assert pttl(redis_client, key) <= before_ttl
    # the same attempt cannot be retried twice (a timed-out step and the reaper racing)
    again = store.retry_attempt(key, attempt=1, reap_after_s=30, reap_grace_s=1)
    assert again is WriteStatus.SUPERSEDED
    # a kept raw response is projected, never run again; a sealed call stays sealed
    assert store.store_raw(key, '{"hits":[]}') is WriteStatus.OK
    stored = store.retry_attempt(key, attempt=2, reap_after_s=30, reap_grace_s=1)
    assert stored is WriteStatus.ALREADY_STORED
    store.seal_error(key, ErrorCode.WORKER_LOST)
    assert (
        store.retry_attempt(key, attempt=2, reap_after_s=30, reap_grace_s=1)
        is WriteStatus.NOT_PROJECTING
    )


def test_attempt_state_says_what_the_reaper_needs(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    key = create_projecting(store)
    state = store.attempt_state(key)
    assert state is not None
    assert (state.tool_name, state.attempt, state.started, state.has_raw) == (TOOL, 1, False, False)
    store.retry_attempt(key, attempt=1, reap_after_s=30, reap_grace_s=1, redispatch=True)
    store.claim(key, attempt=2, heartbeat_timeouts={})
    state = store.attempt_state(key)
    assert state is not None
    assert (state.attempt, state.started, state.redispatches, state.tool_runs) == (2, True, 1, 1)
    store.seal_error(key, ErrorCode.WORKER_LOST)
    assert store.attempt_state(key) is None
