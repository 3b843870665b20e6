"""Request fingerprints on real Redis: the same call again and another call under a used id
are told apart in the create script's one round trip, the first record is never touched, and
``replay=True`` hands back the first call's outcome without running or charging anything."""

from __future__ import annotations

import asyncio

import pytest
import redis

from boundary import (
    CanonicalStore,
    ErrorCode,
    InvocationStatus,
    RedisCanonicalStore,
    Submission,
    ToolBoundary,
    ToolOutcome,
    ToolRegistry,
)
from boundary.fingerprint import request_sha256
from boundary.store import CreateStatus, keys
from tests.support.helpers import (
    RUN_ID,
    TOOL,
    FakeTool,
    create_projecting,
    create_terms,
    envelope,
    key_of,
    make_run,
    register,
    snapshot,
)

FIRST = '{"query": "timeout"}'
SAME = '{ "query" : "timeout" }'
OTHER = '{"query": "something else"}'


def test_create_keeps_the_fingerprint_of_tool_and_arguments(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # When a call is created
    key = create_projecting(store, request='{"query":"timeout"}')
    # Then its record holds the fingerprint of its tool and canonical arguments
    expected = request_sha256(TOOL, '{"query":"timeout"}')
    assert redis_client.hget(keys.record_key(key), "request_sha256") == expected
    record = store.get(key)
    assert record is not None and record.request_sha256 == expected


@pytest.mark.parametrize(
    ("terms", "status"),
    [
        ({"request": '{"query":"timeout"}'}, CreateStatus.DUPLICATE),
        ({"request": '{"query":"other"}'}, CreateStatus.CONFLICT),
        ({"request": '{"query":"timeout"}', "tool_name": "search_logs"}, CreateStatus.CONFLICT),
    ],
)
def test_a_used_id_is_refused_as_duplicate_or_conflict_and_nothing_changes(
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
    terms: dict[str, str],
    status: CreateStatus,
) -> None:
    # Given a created call, in a run whose budget it used up
    key = create_projecting(store, request='{"query":"timeout"}')
    record = snapshot(redis_client, keys.record_key(key))
    budget = redis_client.hgetall(keys.budget_key(RUN_ID))
    # When the id is created again (with the run's budget exhausted)
    result = store.create(key, **create_terms(max_run_calls=1, max_tool_calls=1, **terms))
    # Then the duplicate is decided before the budget, and nothing changed
    assert result.status is status
    assert snapshot(redis_client, keys.record_key(key)) == record
    assert redis_client.hgetall(keys.budget_key(RUN_ID)) == budget


def test_a_record_of_the_previous_version_is_a_conflict_free_duplicate(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given a completed call whose record was written without a fingerprint (before upgrade)
    tool, _ = register(registry)
    run = make_run()
    first = boundary.invoke(envelope("call_1", FIRST), run, timeout=5)
    redis_client.hdel(keys.record_key(key_of("call_1")), "request_sha256")
    old = store.get(key_of("call_1"))
    assert old is not None and old.request_sha256 is None
    # When the id comes again, even with other arguments
    again = boundary.invoke(envelope("call_1", OTHER), run, timeout=5)
    replayed = boundary.invoke(envelope("call_1", OTHER), run, timeout=5, replay=True)
    # Then it is the plain duplicate (no conflict), and a replay gets the first outcome
    assert again == ToolOutcome.error("call_1", ErrorCode.DUPLICATE_TOOL_CALL)
    assert replayed == first and first.status is InvocationStatus.READY
    assert tool.calls.value == 1


def test_replay_returns_the_first_outcome_without_running_or_charging(
    boundary: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a completed call that used up its run's only call
    tool, projector = register(registry)
    run = make_run(max_tool_calls=1)
    first = boundary.invoke(envelope("call_1", FIRST), run, timeout=5)
    assert first.status is InvocationStatus.READY
    budget = redis_client.hgetall(keys.budget_key(RUN_ID))
    record = snapshot(redis_client, keys.record_key(key_of("call_1")))
    # When the agent, resumed, makes the same call again with replay (key order aside)
    replayed = boundary.invoke(envelope("call_1", SAME), run, timeout=5, replay=True)
    submitted = boundary.submit(envelope("call_1", FIRST), run, replay=True)
    # Then it gets the first outcome; nothing ran, was charged or changed
    assert replayed == first
    assert submitted == Submission(key=key_of("call_1"), accepted=True, replayed=True)
    assert boundary.outcome(RUN_ID, "call_1", timeout=1) == first
    assert tool.calls.value == 1 and projector.calls.value == 1
    assert redis_client.hgetall(keys.budget_key(RUN_ID)) == budget
    assert snapshot(redis_client, keys.record_key(key_of("call_1"))) == record


def test_replay_of_another_call_under_the_id_is_still_a_conflict(
    boundary: ToolBoundary, registry: ToolRegistry
) -> None:
    tool, _ = register(registry)
    run = make_run()
    boundary.invoke(envelope("call_1", FIRST), run, timeout=5)

    replayed = boundary.invoke(envelope("call_1", OTHER), run, timeout=5, replay=True)
    submitted = boundary.submit(envelope("call_1", OTHER), run, replay=True)

    conflict = ToolOutcome.error("call_1", ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT)
    assert replayed == conflict
    assert submitted.outcome == conflict and not submitted.accepted and not submitted.replayed
    assert tool.calls.value == 1


def test_replay_of_a_failed_call_returns_its_error(
    boundary: ToolBoundary, registry: ToolRegistry
) -> None:
    # Given a call whose tool failed
    tool, _ = register(registry, FakeTool(error=RuntimeError("boom")))
    run = make_run()
    first = boundary.invoke(envelope("call_1", FIRST), run, timeout=5)
    assert first.error_code is ErrorCode.TOOL_EXECUTION_FAILED
    # When it is replayed, the failure is the answer: the tool is not run again
    assert boundary.invoke(envelope("call_1", FIRST), run, timeout=5, replay=True) == first
    assert tool.calls.value == 1


def test_async_replay_returns_the_first_outcome(
    boundary: ToolBoundary, registry: ToolRegistry, store: CanonicalStore
) -> None:
    # Given a completed call
    tool, _ = register(registry)
    run = make_run()
    first = boundary.invoke(envelope("call_1", FIRST), run, timeout=5)

    async def again() -> tuple[ToolOutcome, Submission, ToolOutcome]:
        try:
            replayed = await boundary.ainvoke(envelope("call_1", SAME), run, 5, replay=True)
            submitted = await boundary.asubmit(envelope("call_1", FIRST), run, replay=True)
            plain = await boundary.ainvoke(envelope("call_1", FIRST), run, 5)
            return replayed, submitted, plain
        finally:
            await boundary.aclose()

    # When the same call is made again through the async calls
    replayed, submitted, plain = asyncio.run(again())
    # Then replay answers with the first outcome, and without replay it is a duplicate
    assert replayed == first
    assert submitted == Submission(key=key_of("call_1"), accepted=True, replayed=True)
    assert plain == ToolOutcome.error("call_1", ErrorCode.DUPLICATE_TOOL_CALL)
    assert tool.calls.value == 1
