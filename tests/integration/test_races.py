"""Races on real Redis: many threads at once, and the Lua scripts still decide exactly once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    Limits,
    RedisCanonicalStore,
    Submission,
    ToolBoundary,
    ToolRegistry,
)
from boundary.store import WriteStatus, keys
from tests.conftest import STORE_DB, redis_url
from tests.support.helpers import (
    RUN_ID,
    TOOL,
    FakeTool,
    create_projecting,
    envelope,
    is_running,
    key_of,
    make_run,
    monitored,
    record_keys,
    register,
    wait_until,
)

T = TypeVar("T")


@pytest.fixture
def store(redis_client: redis.Redis, limits: Limits) -> Iterator[RedisCanonicalStore]:
    """The store made the common way (``from_url``), whose pool lets a burst of threads wait
    for a connection; it replaces the shared fixture's for this module (and its boundary)."""
    store = RedisCanonicalStore.from_url(redis_url(STORE_DB), ttl_s=600, limits=limits)
    yield store
    store.client.close()


def all_at_once(count: int, work: Callable[[int], T]) -> list[T]:
    """Runs ``work(i)`` for ``i`` in ``range(count)`` on ``count`` threads released together."""
    barrier = threading.Barrier(count)

    def run(i: int) -> T:
        barrier.wait()
        return work(i)

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


def codes(submissions: list[Submission]) -> Counter[str]:
    return Counter(
        "ACCEPTED" if s.accepted else str(s.outcome.error_code if s.outcome else None)
        for s in submissions
    )


def test_concurrent_duplicates_create_one_record_and_execute_once(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given a tool that counts its runs, and 50 threads holding the same framework id,
    # each with its own arguments
    tool, projector = register(registry)
    run = make_run()
    # When they all submit at once
    submissions = all_at_once(50, lambda i: boundary.submit(envelope("call_1", {"thread": i}), run))
    # Then exactly one is accepted and the other 49 are told the id was used for another call
    assert codes(submissions) == {"ACCEPTED": 1, "DUPLICATE_TOOL_CALL_CONFLICT": 49}
    # And one record exists, the tool ran once, with the winner's arguments, stored whole
    assert record_keys(redis_client) == {keys.record_key(key_of("call_1"))}
    assert tool.calls.value == 1
    assert projector.calls.value == 1
    winner = next(i for i, s in enumerate(submissions) if s.accepted)
    assert tool.arguments == [{"thread": winner}]
    record = store.get(key_of("call_1"))
    assert record is not None
    assert json.loads(record.request) == {"thread": winner}
    assert redis_client.hget(keys.budget_key(RUN_ID), "calls") == "1"


def test_concurrent_calls_against_a_run_budget_accept_exactly_the_budget(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given a run allowed 10 tool calls
    tool, _ = register(registry)
    run = make_run(max_tool_calls=10)
    # When 100 distinct calls are submitted at once
    submissions = all_at_once(100, lambda i: boundary.submit(envelope(f"call_{i}"), run))
    # Then exactly 10 are accepted, the rest refused for the run budget
    assert codes(submissions) == {"ACCEPTED": 10, "RUN_BUDGET_EXHAUSTED": 90}
    assert tool.calls.value == 10
    assert len(record_keys(redis_client)) == 10
    # And the accepted calls hold the sequence numbers 1..10, each once
    seqs = []
    for submission in submissions:
        if submission.accepted:
            assert submission.key is not None
            record = store.get(submission.key)
            assert record is not None
            seqs.append(record.seq)
    assert sorted(seqs) == list(range(1, 11))
    assert redis_client.hget(keys.budget_key(RUN_ID), "calls") == "10"


def test_concurrent_calls_against_a_tool_budget_accept_exactly_the_budget(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given a run allowed 10 calls of the search tool and any number of another tool
    search, _ = register(registry)
    other, _ = register(registry, FakeTool(), name="other")
    run = make_run(tools=(TOOL, "other"), max_calls_per_tool={TOOL: 10})

    # When 100 search calls and 20 other calls are submitted at once
    def submit(i: int) -> Submission:
        name = TOOL if i < 100 else "other"
        return boundary.submit(envelope(f"call_{i}", tool_name=name), run)

    submissions = all_at_once(120, submit)
    # Then exactly 10 search calls are accepted, and every other-tool call is
    assert codes(submissions[:100]) == {"ACCEPTED": 10, "TOOL_BUDGET_EXHAUSTED": 90}
    assert codes(submissions[100:]) == {"ACCEPTED": 20}
    assert (search.calls.value, other.calls.value) == (10, 20)
    # And the 30 accepted calls hold the sequence numbers 1..30, each once
    seqs = sorted(
        record.seq
        for record in (store.get(s.key) for s in submissions if s.accepted and s.key)
        if record is not None
    )
    assert seqs == list(range(1, 31))
    assert redis_client.hget(keys.budget_key(RUN_ID), f"tool:{TOOL}") == "10"


def test_run_and_tool_budgets_together_never_overshoot(
    boundary: ToolBoundary, registry: ToolRegistry
) -> None:
    # Given a run allowed 15 calls in all and 10 of the search tool
    search, _ = register(registry)
    other, _ = register(registry, FakeTool(), name="other")
    run = make_run(tools=(TOOL, "other"), max_tool_calls=15, max_calls_per_tool={TOOL: 10})
    # When 50 search and 50 other calls are submitted at once
    submissions = all_at_once(
        100,
        lambda i: boundary.submit(envelope(f"call_{i}", tool_name=TOOL if i % 2 else "other"), run),
    )
    # Then exactly 15 are accepted, at most 10 of them search calls
    assert codes(submissions)["ACCEPTED"] == 15
    assert search.calls.value <= 10
    assert search.calls.value + other.calls.value == 15


def test_concurrent_seals_seal_exactly_once(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a PROJECTING record
    key = create_projecting(store)

    # When 40 threads seal it at once, half READY and half ERROR
    def seal(i: int) -> tuple[int, WriteStatus]:
        if i % 2:
            return i, store.seal_error(key, ErrorCode.WORKER_LOST)
        written = store.seal(
            key, evidence_status=EvidenceStatus.EVIDENCE_FOUND, agent_result=json.dumps(i)
        )
        return i, written

    results = all_at_once(40, seal)
    # Then exactly one seal wins; the record holds the winner's outcome
    winners = [i for i, written in results if written is WriteStatus.OK]
    assert len(winners) == 1
    assert Counter(w for _, w in results) == {WriteStatus.OK: 1, WriteStatus.NOT_PROJECTING: 39}
    record = store.get(key)
    assert record is not None
    if winners[0] % 2:
        assert record.error_code is ErrorCode.WORKER_LOST
    else:
        assert record.agent_result == json.dumps(winners[0])
    # And the identity is indexed once and counted once
    assert redis_client.zcard(keys.progress_key(RUN_ID)) == 1
    budget = redis_client.hgetall(keys.budget_key(RUN_ID))
    assert int(budget.get("sealed:READY", 0)) + int(budget.get("sealed:ERROR", 0)) == 1


def test_concurrent_raw_writes_keep_exactly_one(store: RedisCanonicalStore) -> None:
    # Given a PROJECTING record
    key = create_projecting(store)
    # When 40 threads store a raw response at once
    results = all_at_once(40, lambda i: (i, store.store_raw(key, json.dumps({"writer": i}))))
    # Then one is stored and the others are refused; the stored one is the winner's, whole
    winners = [i for i, written in results if written is WriteStatus.OK]
    assert len(winners) == 1
    assert Counter(w for _, w in results)[WriteStatus.ALREADY_STORED] == 39
    record = store.get(key)
    assert record is not None
    assert json.loads(record.raw or "") == {"writer": winners[0]}


def test_concurrent_invocations_of_distinct_calls_all_complete(
    boundary: ToolBoundary, registry: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Given a run without limits
    tool, _ = register(registry)
    run = make_run()
    # When 60 distinct calls are invoked at once
    outcomes: list[Any] = all_at_once(
        60, lambda i: boundary.invoke(envelope(f"call_{i}"), run, timeout=10)
    )
    # Then every one completes READY, and the run's progress holds each once, in sequence
    assert all(o.status == "READY" for o in outcomes)
    assert tool.calls.value == 60
    entries = store.progress(RUN_ID)
    assert sorted(e.key.tool_call_id for e in entries) == sorted(f"call_{i}" for i in range(60))
    assert [e.seq for e in entries] == list(range(1, 61))
    facts = boundary.observe(run)
    assert len(facts.facts) + facts.omitted == 60


def test_a_burst_beyond_the_connection_pool_waits_instead_of_failing(
    redis_client: redis.Redis,
) -> None:
    # Given a store made the common way, from a URL
    store = RedisCanonicalStore.from_url(redis_url(STORE_DB), ttl_s=600)

    def busy(i: int) -> int:
        key = create_projecting(store, f"call_{i}")
        return sum(store.get(key) is not None for _ in range(20))

    # When 150 threads use it at the same moment (more than redis-py's 100 pooled connections)
    found = all_at_once(150, busy)
    # Then every call is served: a burst waits for a connection, it is not STORE_UNAVAILABLE
    assert found == [20] * 150
    store.client.close()


def test_outcome_read_by_another_thread_waits_without_hammering_redis(
    boundary: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a slow tool running in one thread (the in-process dispatcher runs it at submit)
    release = threading.Event()
    register(registry, FakeTool(during=lambda arguments: release.wait(5)))
    runner = threading.Thread(target=lambda: boundary.submit(envelope("call_1"), make_run()))
    runner.start()
    wait_until(
        lambda: redis_client.exists(keys.record_key(key_of("call_1"))),
        "the call's record",
        every=0.005,
    )
    # When another thread asks for its outcome while it still runs
    with monitored(redis_client) as commands:
        pending = boundary.outcome(RUN_ID, "call_1", timeout=0.5)
    release.set()
    runner.join(5)
    # Then it gets the call's real state, still running, rather than an exception
    assert pending.pending
    assert is_running(pending, "call_1"), pending
    # And it polled the record a few times, not in a busy loop
    reads = [c for c in commands if c.startswith(("hgetall", "hmget"))]
    assert 1 <= len(reads) <= 10
    # And once the call completes, the same question gets the READY outcome
    assert boundary.outcome(RUN_ID, "call_1", timeout=5).status == "READY"
