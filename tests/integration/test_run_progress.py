"""Spec requirement 7: a run's completed calls become bounded observed facts, read through the
canonical store (real Redis), never from a second copy of the truth."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection

from boundary import (
    EvidenceStatus,
    InvocationStatus,
    Limits,
    Projection,
    RedisCanonicalStore,
    StoreUnavailable,
    ToolBoundary,
    ToolRegistry,
    ToolSpec,
)
from boundary.limits import canonical_json, utf8_size
from boundary.store import keys
from tasks.views import observe_run
from tests.conftest import STORE_DB
from tests.support.helpers import (
    RUN_ID,
    TOOL,
    create_projecting,
    envelope,
    expiry_commands,
    key_of,
    make_boundary,
    make_run,
    monitored,
    wait_until,
)

#: Text only the raw response holds: it must never appear in a fact.
RAW_ONLY = "raw-only-7d1e"
RUN = make_run()


class QueryProjector:
    """EVIDENCE_FOUND for a query with an answer; a scoped NO_EVIDENCE for "nothing"."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        if request["query"] == "nothing":
            return Projection(
                evidence_status=EvidenceStatus.NO_EVIDENCE,
                scope={"query": "nothing", "service": "api"},
            )
        return Projection(
            evidence_status=EvidenceStatus.EVIDENCE_FOUND,
            result={"answer": request["query"]},
            scope={"query": request["query"]},
        )


def search(arguments: dict[str, Any]) -> dict[str, Any]:
    if arguments["query"] == "fail":
        raise RuntimeError("the tool broke")
    return {"hits": [arguments["query"]], "internal": RAW_ONLY}


@pytest.fixture
def tools(registry: ToolRegistry) -> ToolRegistry:
    registry.register(
        ToolSpec(name=TOOL, executor=search, projector=QueryProjector(), read_only=True)
    )
    return registry


def call(boundary: ToolBoundary, call_id: str, query: str, run_id: str = RUN_ID) -> None:
    outcome = boundary.invoke(
        envelope(call_id, {"query": query}, run_id=run_id), make_run(run_id), timeout=5
    )
    assert outcome.status in (InvocationStatus.READY, InvocationStatus.ERROR)


def fact_ids(boundary: ToolBoundary, run_id: str = RUN_ID) -> list[str]:
    return [f.tool_call_id for f in boundary.observe(run_id).facts]


def progress_member(run_id: str, call_id: str, expires_in_s: float = 600) -> str:
    return f"{run_id}:{call_id}:{int((time.time() + expires_in_s) * 1000)}"


# --- Scenario: Completed calls are projected ----------------------------------------------


def test_completed_calls_are_projected_in_execution_order_as_bounded_facts(
    boundary: ToolBoundary, tools: ToolRegistry
) -> None:
    # Given a run that ends after several READY calls
    for call_id, query in (("c1", "timeout"), ("c2", "nothing"), ("c3", "disk")):
        call(boundary, call_id, query)

    # When the run is observed
    facts = boundary.observe(RUN)

    # Then each indexed record becomes a fact, in acceptance order, from the agent results
    assert [f.tool_call_id for f in facts.facts] == ["c1", "c2", "c3"]
    assert [f.tool_name for f in facts.facts] == [TOOL] * 3
    assert facts.facts[0].result == {"answer": "timeout"}
    assert facts.excluded == {}
    assert facts.omitted == 0
    assert RAW_ONLY not in facts.model_dump_json()


def test_no_evidence_fact_stays_a_scoped_negative_observation(
    boundary: ToolBoundary, tools: ToolRegistry
) -> None:
    call(boundary, "c1", "timeout")
    call(boundary, "c2", "nothing")

    facts = boundary.observe(RUN)

    negative = facts.facts[1]
    assert negative.evidence_status is EvidenceStatus.NO_EVIDENCE
    assert negative.negative
    assert negative.scope == {"query": "nothing", "service": "api"}
    assert negative.result is None
    assert not facts.facts[0].negative
    # Never counted as found evidence.
    assert facts.evidence_count == 1


def test_tracker_keeps_only_ordered_identities_and_no_second_copy(
    boundary: ToolBoundary, tools: ToolRegistry, redis_client: redis.Redis
) -> None:
    for call_id, query in (("c1", "timeout"), ("c2", "disk")):
        call(boundary, call_id, query)

    members = redis_client.zrange(keys.progress_key(RUN_ID), 0, -1, withscores=True)

    # Identities and acceptance order only: no results, no raw data.
    assert [m.rsplit(":", 1)[0] for m, _ in members] == ["run-1:c1", "run-1:c2"]
    assert [score for _, score in members] == [1.0, 2.0]
    assert all(m.rsplit(":", 1)[1].isdigit() for m, _ in members)
    # The run's keys: the two records, its counters, its progress set, nothing else (but the
    # global runs index; the pending-runs index went with the last seal: nothing is pending).
    assert set(redis_client.scan_iter(match="*")) == {
        keys.record_key(key_of("c1")),
        keys.record_key(key_of("c2")),
        keys.budget_key(RUN_ID),
        keys.progress_key(RUN_ID),
        keys.RUNS,
    }


def test_observe_of_an_unknown_run_is_empty(boundary: ToolBoundary) -> None:
    facts = boundary.observe("run-nobody")

    assert (facts.facts, facts.excluded, facts.omitted) == ((), {}, 0)


def test_the_batch_reader_sees_what_observe_sees(
    boundary: ToolBoundary, tools: ToolRegistry, store: RedisCanonicalStore
) -> None:
    call(boundary, "c1", "timeout")
    call(boundary, "c2", "fail")

    assert observe_run(store, RUN_ID) == boundary.observe(RUN)


# --- Scenario: Indexed identity is invalid ------------------------------------------------


def test_missing_identity_is_excluded(
    boundary: ToolBoundary, tools: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given an indexed call whose record was deleted
    call(boundary, "c1", "timeout")
    call(boundary, "c2", "disk")
    redis_client.delete(keys.record_key(key_of("c2")))

    # When the run is observed
    facts = boundary.observe(RUN)

    # Then it is excluded and counted, and cannot become evidence
    assert [f.tool_call_id for f in facts.facts] == ["c1"]
    assert facts.excluded == {"missing": 1}
    assert facts.evidence_count == 1


def test_expired_identity_is_excluded(
    boundary: ToolBoundary, tools: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a call whose record lived one second, then a later call that keeps the run alive
    short_lived, _ = make_boundary(redis_client, tools, ttl_s=1)
    call(short_lived, "c1", "timeout")
    call(boundary, "c2", "disk")
    first = keys.record_key(key_of("c1"))
    # Only a key that never expires reaches the patience
    wait_until(lambda: not redis_client.exists(first), "c1's record to expire", 30, every=0.05)
    time.sleep(0.05)  # past the expiry the progress member recorded, on our clock too

    # When the run is observed
    facts = boundary.observe(RUN)

    # Then the expired identity is excluded as expired (not as missing)
    assert [f.tool_call_id for f in facts.facts] == ["c2"]
    assert facts.excluded == {"expired": 1}


@pytest.mark.parametrize("how", ["foreign_identity", "record_of_another_run"])
def test_cross_run_identity_is_excluded(
    how: str, boundary: ToolBoundary, tools: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a READY call of another run, indexed in this run's progress
    call(boundary, "c1", "timeout")
    if how == "foreign_identity":
        call(boundary, "x1", "disk", run_id="run-2")
        redis_client.zadd(keys.progress_key(RUN_ID), {progress_member("run-2", "x1"): 2})
    else:
        # A record under this run's key that belongs to another run.
        call(boundary, "c2", "disk")
        redis_client.hset(keys.record_key(key_of("c2")), "run_id", "run-2")

    # When this run is observed
    with monitored(redis_client) as commands:
        facts = boundary.observe(RUN)

    # Then only this run's own record is a fact, and the other run's record is not even read
    assert not [c for c in commands if "tb:{run-2}" in c]
    assert [f.tool_call_id for f in facts.facts] == ["c1"]
    assert facts.excluded == {"cross_run": 1}
    assert facts.evidence_count == 1
    if how == "foreign_identity":
        # The other run still sees its own call.
        assert fact_ids(boundary, "run-2") == ["x1"]


def test_projecting_identity_is_excluded(
    boundary: ToolBoundary,
    tools: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given an indexed identity whose record is still PROJECTING
    call(boundary, "c1", "timeout")
    pending = create_projecting(store, "c2")
    redis_client.zadd(keys.progress_key(RUN_ID), {progress_member(RUN_ID, "c2"): 2})
    assert store.get(pending).status is InvocationStatus.PROJECTING

    facts = boundary.observe(RUN)

    assert [f.tool_call_id for f in facts.facts] == ["c1"]
    assert facts.excluded == {"projecting": 1}


@pytest.mark.parametrize("how", ["tool_failed", "status_rewritten"])
def test_error_identity_is_excluded(
    how: str,
    boundary: ToolBoundary,
    tools: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given an indexed ERROR record: sealed ERROR by the boundary, or rewritten by hand
    call(boundary, "c1", "timeout")
    if how == "tool_failed":
        call(boundary, "c2", "fail")
    else:
        call(boundary, "c2", "disk")
        redis_client.hset(
            keys.record_key(key_of("c2")),
            mapping={"status": "ERROR", "evidence_status": "ERROR", "error_code": "WORKER_LOST"},
        )
    assert store.get(key_of("c2")).status is InvocationStatus.ERROR

    facts = boundary.observe(RUN)

    assert [f.tool_call_id for f in facts.facts] == ["c1"]
    assert facts.excluded == {"error": 1}
    assert facts.evidence_count == 1


@pytest.mark.parametrize("member", ["garbage", "run-1:c9", "run-1:c{9}:123", "run-1:c9:not-a-time"])
def test_a_member_that_is_no_identity_is_counted_missing_not_dropped(
    member: str, boundary: ToolBoundary, tools: ToolRegistry, redis_client: redis.Redis
) -> None:
    call(boundary, "c1", "timeout")
    redis_client.zadd(keys.progress_key(RUN_ID), {member: 2})

    facts = boundary.observe(RUN)

    assert [f.tool_call_id for f in facts.facts] == ["c1"]
    assert facts.excluded == {"missing": 1}


@pytest.mark.parametrize(
    "fields",
    [{"status": "DONE"}, {"seq": "first"}, {"agent_result": "{not json"}],
    ids=["unknown_status", "bad_seq", "result_not_json"],
)
def test_a_record_this_code_did_not_write_is_excluded_without_failing_the_run(
    fields: dict[str, str],
    boundary: ToolBoundary,
    tools: ToolRegistry,
    redis_client: redis.Redis,
) -> None:
    # Given a run whose second record was rewritten by hand
    call(boundary, "c1", "timeout")
    call(boundary, "c2", "disk")
    call(boundary, "c3", "logs")
    redis_client.hset(keys.record_key(key_of("c2")), mapping=fields)

    # When the run is observed
    facts = boundary.observe(RUN)

    # Then that record cannot become evidence, and the others still are facts
    assert [f.tool_call_id for f in facts.facts] == ["c1", "c3"]
    assert facts.excluded == {"error": 1}


def test_exclusions_are_counted_by_reason_together(
    boundary: ToolBoundary,
    tools: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    call(boundary, "c1", "timeout")
    call(boundary, "c2", "fail")
    call(boundary, "c3", "disk")
    call(boundary, "c4", "nothing")
    redis_client.delete(keys.record_key(key_of("c3")))
    create_projecting(store, "c5")
    redis_client.zadd(keys.progress_key(RUN_ID), {progress_member(RUN_ID, "c5"): 5})
    redis_client.zadd(keys.progress_key(RUN_ID), {progress_member("run-9", "c6"): 6})

    facts = boundary.observe(RUN)

    assert [f.tool_call_id for f in facts.facts] == ["c1", "c4"]
    assert facts.excluded == {"error": 1, "missing": 1, "projecting": 1, "cross_run": 1}


# --- Order: acceptance, not completion -----------------------------------------------------


def test_order_is_acceptance_order_when_calls_complete_out_of_order(
    redis_client: redis.Redis, registry: ToolRegistry
) -> None:
    # Given a slow first call that is still running when a fast second call completes
    started, release = threading.Event(), threading.Event()

    def tool(arguments: dict[str, Any]) -> dict[str, Any]:
        if arguments["query"] == "slow":
            started.set()
            assert release.wait(10)
        return {"hits": [arguments["query"]]}

    registry.register(
        ToolSpec(name=TOOL, executor=tool, projector=QueryProjector(), read_only=True)
    )
    boundary, store = make_boundary(redis_client, registry)
    slow = threading.Thread(target=call, args=(boundary, "c-slow", "slow"))
    slow.start()
    assert started.wait(5)
    call(boundary, "c-fast", "fast")
    # The fast call is sealed while the slow one still runs: it completed first (told by
    # state, not by timestamps, which two seals can share to the millisecond)...
    assert store.get(key_of("c-fast")).status is InvocationStatus.READY
    assert store.get(key_of("c-slow")).status is InvocationStatus.PROJECTING
    release.set()
    slow.join(10)
    fast_record, slow_record = store.get(key_of("c-fast")), store.get(key_of("c-slow"))
    assert slow_record.status is InvocationStatus.READY
    assert slow_record.seq < fast_record.seq  # ...but was accepted second

    # When the run is observed
    facts = boundary.observe(RUN)

    # Then the facts follow acceptance order
    assert [f.tool_call_id for f in facts.facts] == ["c-slow", "c-fast"]


# --- Bounds ---------------------------------------------------------------------------------


def test_two_hundred_ready_calls_yield_at_most_max_facts_and_an_exact_omitted(
    redis_client: redis.Redis, tools: ToolRegistry
) -> None:
    # Given a run of 200 READY calls and a bound of 50 facts
    boundary, _ = make_boundary(redis_client, tools, limits=Limits(max_facts=50))
    for i in range(200):
        call(boundary, f"c{i:03d}", f"q{i}")

    # When it is observed
    facts = boundary.observe(RUN)

    # Then the first 50 in acceptance order are facts and the other 150 are counted
    assert [f.tool_call_id for f in facts.facts] == [f"c{i:03d}" for i in range(50)]
    assert facts.omitted == 150
    assert facts.excluded == {}


def test_byte_bound_keeps_a_prefix_and_counts_the_rest(
    redis_client: redis.Redis, tools: ToolRegistry
) -> None:
    fact_size = utf8_size(
        canonical_json(
            {
                "tool_call_id": "c000",
                "tool_name": TOOL,
                "evidence_status": "EVIDENCE_FOUND",
                "result": {"answer": "q000"},
                "scope": {"query": "q000"},
                "projector_version": "1",
            }
        )
    )
    limit = fact_size * 10 + fact_size // 2  # room for ten and a half facts
    boundary, _ = make_boundary(redis_client, tools, limits=Limits(max_facts_bytes=limit))
    for i in range(200):
        call(boundary, f"c{i:03d}", f"q{i:03d}")

    facts = boundary.observe(RUN)

    sizes = [utf8_size(canonical_json(f.model_dump(mode="json"))) for f in facts.facts]
    assert [f.tool_call_id for f in facts.facts] == [f"c{i:03d}" for i in range(10)]
    assert sum(sizes) <= limit
    assert facts.omitted == 190


def test_exclusions_are_not_counted_as_omitted(
    redis_client: redis.Redis, tools: ToolRegistry
) -> None:
    boundary, _ = make_boundary(redis_client, tools, limits=Limits(max_facts=10))
    for i in range(20):
        call(boundary, f"c{i:02d}", "fail" if i % 4 == 0 else f"q{i}")

    facts = boundary.observe(RUN)

    assert len(facts.facts) == 10
    assert facts.excluded == {"error": 5}
    assert facts.omitted == 5
    assert len(facts.facts) + facts.omitted + sum(facts.excluded.values()) == 20


# --- Reads: pipelined, and never touching expiry --------------------------------------------


@contextmanager
def round_trips(db: int) -> Iterator[list[int]]:
    """Counts this thread's writes to Redis connections on ``db``: one per round trip (a
    pipeline sends all its commands at once)."""
    count = [0]
    original = AbstractConnection.send_packed_command
    me = threading.get_ident()

    def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        if self.db == db and threading.get_ident() == me:
            count[0] += 1
        original(self, command, check_health)

    AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    try:
        yield count
    finally:
        AbstractConnection.send_packed_command = original  # type: ignore[method-assign]


def test_observe_of_a_hundred_calls_takes_two_round_trips_and_no_expiry_command(
    boundary: ToolBoundary, tools: ToolRegistry, redis_client: redis.Redis
) -> None:
    for i in range(100):
        call(boundary, f"c{i:03d}", f"q{i}")
    ttl_before = redis_client.pttl(keys.record_key(key_of("c000")))

    with monitored(redis_client) as seen:
        # MONITOR holds a connection of its own: set up the next one before counting.
        redis_client.ping()
        with round_trips(STORE_DB) as trips:
            facts = boundary.observe(RUN)
    commands = seen[seen.index("ping") + 1 :]

    assert len(facts.facts) == 50  # the default bound
    # ZRANGEs of progress and pending, then one read_records.lua running the 100 HMGETs
    assert trips == [2]
    names = [c.split(" ", 1)[0] for c in commands]
    assert (names.count("zrange"), names.count("evalsha"), names.count("hmget")) == (2, 1, 100)
    assert len(names) == 103
    assert expiry_commands(commands) == []
    assert redis_client.pttl(keys.record_key(key_of("c000"))) <= ttl_before


def test_observe_raises_store_unavailable_when_redis_is_down(
    tools: ToolRegistry,
) -> None:
    store = RedisCanonicalStore.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    boundary = ToolBoundary(store=store, registry=tools, dispatcher=None)  # type: ignore[arg-type]

    with pytest.raises(StoreUnavailable):
        boundary.observe(RUN)


def test_projection_reads_records_without_their_raw_response(
    boundary: ToolBoundary, tools: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Raw responses may be up to max_raw_bytes each: a run projection never transfers them.
    call(boundary, "c1", "timeout")

    (entry,) = store.progress(RUN_ID)

    assert entry.record is not None
    assert entry.record.raw is None
    assert entry.record.agent_result == '{"answer":"timeout"}'
    assert RAW_ONLY in (store.get(key_of("c1")).raw or "")
