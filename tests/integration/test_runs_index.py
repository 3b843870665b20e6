"""The runs index: on a single Redis the create script keeps every run scored by the expiry of
its newest record, so ``tool-boundary runs`` lists runs without scanning the keyspace."""

from __future__ import annotations

import redis

from boundary import RedisCanonicalStore
from boundary.store import keys
from boundary.store.codec import ms
from tests.helpers import create_projecting, monitored


def test_runs_are_listed_from_the_index_without_a_scan(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given calls of three runs
    for run_id in ("r-a", "r-b", "r-c"):
        create_projecting(store, "c1", run_id=run_id)
    create_projecting(store, "c2", run_id="r-a")
    # When the runs are listed
    with monitored(redis_client) as commands:
        listed = sorted(store.run_ids())
    # Then each run is listed once, and nothing scanned the keyspace (counted on this DB only:
    # other suites share the server)
    assert listed == ["r-a", "r-b", "r-c"]
    assert not [c for c in commands if c.startswith("scan")]


def test_a_run_is_scored_by_its_newest_records_expiry_which_never_moves_back(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a run's call
    first = create_projecting(store, "c1", run_id="r-1")
    record = store.get(first)
    assert record is not None
    # Then the run's score is the record's expiry (created_at + TTL, Redis time)
    ttl_ms = int(store.ttl_s * 1000)
    assert redis_client.zscore(keys.RUNS, "r-1") == ms(record.created_at) + ttl_ms
    assert 0 < redis_client.pttl(keys.RUNS) <= ttl_ms
    # When a store with a shorter TTL creates another call of the run
    short = RedisCanonicalStore(client=store.client, ttl_s=1, limits=store.limits)
    create_projecting(short, "c2", run_id="r-1")
    # Then the run stays scored by the longer-lived record
    assert redis_client.zscore(keys.RUNS, "r-1") == ms(record.created_at) + ttl_ms


def test_expired_runs_are_not_listed_and_creates_trim_them(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given 15 runs in the index whose records expired long ago, and a live one
    redis_client.zadd(keys.RUNS, {f"old-{n}": 1_000 + n for n in range(15)})
    create_projecting(store, "c1", run_id="live")
    # When the runs are listed
    # Then only the live run is
    assert list(store.run_ids()) == ["live"]
    # And the first create of each run trims up to ten expired runs from the index
    assert redis_client.zcard(keys.RUNS) == 1 + 15 - 10
    create_projecting(store, "c2", run_id="live")
    assert redis_client.zcard(keys.RUNS) == 1 + 15 - 10
    create_projecting(store, "c1", run_id="live-2")
    assert sorted(redis_client.zrange(keys.RUNS, 0, -1)) == ["live", "live-2"]
