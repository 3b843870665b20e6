"""The pending-runs index: the reaper reads the runs that have calls PROJECTING instead of
scanning the keyspace, so its cost follows the pending calls, not all records."""

from __future__ import annotations

import asyncio

import pytest
import redis

from boundary import ErrorCode, RedisCanonicalStore
from boundary.store import keys
from boundary.store.base import CreateResult, CreateStatus
from tests.support.helpers import create_projecting, create_terms, key_of, load_scripts, monitored


def test_the_seal_that_ends_a_runs_last_pending_call_drops_it_from_the_index(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given 200 runs of two PROJECTING calls each, and one more run with a call PROJECTING
    for n in range(200):
        for call in ("c1", "c2"):
            create_projecting(store, call, run_id=f"done-{n}")
    stuck = create_projecting(store, "c1", run_id="stuck")
    # When one call of each of the 200 runs is sealed, the runs stay indexed
    for n in range(200):
        store.seal_error(key_of("c1", f"done-{n}"), ErrorCode.TOOL_TIMEOUT)
    assert redis_client.zcard(keys.PENDING_RUNS) == 201
    # And when their last calls are sealed, they leave the index: only the pending run is left
    for n in range(200):
        store.seal_error(key_of("c2", f"done-{n}"), ErrorCode.TOOL_TIMEOUT)
    assert redis_client.zrange(keys.PENDING_RUNS, 0, -1) == [stuck.run_id]
    # Then the reaper reads that run alone, and scans nothing
    with monitored(redis_client) as commands:
        assert store.due_pending() == []  # not due yet
    assert not [c for c in commands if c.startswith("scan")]


def test_a_due_call_is_found_through_the_index(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    create_projecting(store, "c0", run_id="r-due")
    key = store.create(key_of("c1", "r-due"), **create_terms(max_pending_s=0))
    assert key.seq == 2
    due = store.due_pending()
    assert [k.tool_call_id for k in due] == ["c1"]


def test_a_run_whose_call_was_created_since_the_reaper_read_it_stays_indexed(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a run the reaper read with score 1 while its only call was PROJECTING
    key = create_projecting(store, "c1", run_id="r1")
    assert redis_client.zscore(keys.PENDING_RUNS, "r1") == 1
    # When the call is sealed (the run leaves the index) and a new call of the run is created
    # (the run is back, with score 1 again) before the reaper drops what it read
    store.seal_error(key, ErrorCode.TOOL_TIMEOUT)
    create_projecting(store, "c2", run_id="r1")
    dropped = store._unindex_run(keys=store._unindex_keys(["r1"]), args=["r1", "1"])
    # Then the run stays in the index: the script found its pending set
    assert dropped == 0
    assert redis_client.zscore(keys.PENDING_RUNS, "r1") == 1


def test_on_a_cluster_a_run_is_dropped_only_at_the_score_the_reaper_read(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a run the reaper read with score 1, touched by a create since (score 2); without
    # the pending keys (as on a cluster, where they are in other hash slots)
    redis_client.zadd(keys.PENDING_RUNS, {"r1": 2})
    # When the reaper drops what it read
    kept = store._unindex_run(keys=[keys.PENDING_RUNS], args=["r1", "1"])
    # Then the run stays; at the score it has now it would go
    assert kept == 0
    assert redis_client.zscore(keys.PENDING_RUNS, "r1") == 2
    assert store._unindex_run(keys=[keys.PENDING_RUNS], args=["r1", "2"]) == 1


def test_one_pass_drops_many_ended_runs_with_one_script_call_per_chunk(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given 2,500 indexed runs with no pending call left (as a pass finds them after many
    # seals) and one run with a call still PROJECTING
    ended = {f"ended-{n}": 1 for n in range(2500)}
    redis_client.zadd(keys.PENDING_RUNS, ended)
    stuck = create_projecting(store, "c1", run_id="stuck")
    load_scripts(store)
    # When one reaper pass reads the index (1,000 runs per chunk: three chunks)
    with monitored(redis_client) as commands:
        assert store.due_pending() == []
    # Then every ended run left the index, through one script call per chunk (not per run)
    assert redis_client.zrange(keys.PENDING_RUNS, 0, -1) == [stuck.run_id]
    # (counted on this DB only: a server-wide count would include other suites' scripts)
    scripts = [c for c in commands if c.startswith(("evalsha ", "eval "))]
    assert len(scripts) == 3, scripts


@pytest.mark.parametrize("through", ["sync", "async"])
def test_a_call_whose_run_cannot_be_indexed_is_still_created(
    store: RedisCanonicalStore, redis_client: redis.Redis, through: str
) -> None:
    # Given an index key that the create script cannot write (not a sorted set)
    redis_client.set(keys.PENDING_RUNS, "not a sorted set")
    key = key_of("c1", "r-unindexed")
    create = create_terms()
    # When a call is created
    if through == "sync":
        created = store.create(key, **create)
    else:

        async def acreate() -> CreateResult:
            async_store = store.async_store()
            assert async_store is not None
            try:
                return await async_store.create(key, **create)
            finally:
                await async_store.aclose()

        created = asyncio.run(acreate())
    # Then its creator is told it was created, and it was (the index is left as it was)
    assert created.status is CreateStatus.CREATED
    assert redis_client.hget(keys.record_key(key), "status") == "PROJECTING"
    assert redis_client.get(keys.PENDING_RUNS) == "not a sorted set"


@pytest.mark.parametrize("path", ["script", "cluster pipeline"])
def test_a_store_with_a_shorter_ttl_never_shortens_the_index(
    store: RedisCanonicalStore, redis_client: redis.Redis, path: str
) -> None:
    # Given the index, kept alive by a call of the long-lived store
    create_projecting(store, "c1", run_id="r-long")
    long_ttl_ms = int(store.ttl_s * 1000)
    assert redis_client.pttl(keys.PENDING_RUNS) > long_ttl_ms - 60_000
    # When a store with a one-second TTL indexes a run of its own (the create script on a
    # single Redis; the separate pipeline a cluster store uses)
    short = RedisCanonicalStore(client=store.client, ttl_s=1, limits=store.limits)
    if path == "script":
        create_projecting(short, "c1", run_id="r-short")
    else:
        short._index_run("r-short")
    # Then both runs are indexed and the index still lives as long as the longer record
    assert redis_client.zscore(keys.PENDING_RUNS, "r-short") == 1
    assert redis_client.pttl(keys.PENDING_RUNS) > long_ttl_ms - 60_000


def test_a_new_index_made_by_the_cluster_pipeline_expires(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given no index yet, when the cluster path indexes a run
    redis_client.delete(keys.PENDING_RUNS)
    store._index_run("r-1")
    # Then the new index has the store's TTL (no immortal key)
    assert 0 < redis_client.pttl(keys.PENDING_RUNS) <= int(store.ttl_s * 1000)


def test_calls_projecting_are_counted_from_the_index_without_a_scan(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given three runs with five calls PROJECTING between them
    for run_id, calls in (("gauge-a", 3), ("gauge-b", 1), ("gauge-c", 1)):
        for n in range(calls):
            create_projecting(store, f"c{n}", run_id=run_id)
    with monitored(redis_client) as commands:
        assert store.count_projecting() == 5
        # When two are sealed, they are no longer counted
        store.seal_error(key_of("c0", "gauge-a"), ErrorCode.TOOL_TIMEOUT)
        store.seal_error(key_of("c0", "gauge-b"), ErrorCode.TOOL_TIMEOUT)
        assert store.count_projecting() == 3
    # Then nothing was scanned (counted on this DB only: other suites share the server)
    assert not [c for c in commands if c.startswith("scan")]


def test_heartbeat_lag_is_the_longest_silence_of_a_running_call(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given no call running yet: no lag
    quiet = create_projecting(store, "quiet", run_id="lag-a")
    assert store.heartbeat_lag_s() is None
    # When one tool started 500 s ago and beat 30 s ago, another started 60 s ago and never
    # beat, and a third has not started (times as the long-tools scripts write them, in ms)
    seconds, _ = redis_client.time()
    now_ms = seconds * 1000
    beating = create_projecting(store, "beating", run_id="lag-a")
    silent = create_projecting(store, "silent", run_id="lag-b")
    redis_client.hset(
        keys.record_key(beating),
        mapping={"started_at": now_ms - 500_000, "heartbeat_at": now_ms - 30_000},
    )
    redis_client.hset(keys.record_key(silent), mapping={"started_at": now_ms - 60_000})
    # Then the lag is the silent call's, at least 60 s (not the not-started one's, nor 500 s)
    lag = store.heartbeat_lag_s()
    assert lag is not None and 60 <= lag < 400
    # and once it is sealed, the beating call's
    store.seal_error(silent, ErrorCode.TOOL_TIMEOUT)
    lag = store.heartbeat_lag_s()
    assert lag is not None and 30 <= lag < 60
    assert quiet.tool_call_id == "quiet"
