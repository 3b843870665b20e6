"""TTL on real Redis: set once when a record is created, never renewed by a read, only kept by
an update; every key this project writes expires."""

from __future__ import annotations

import itertools
import time
from typing import Any

import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolRegistry,
)
from boundary.store import WriteStatus, keys
from tests.support.helpers import (
    RUN_ID,
    FakeTool,
    create_projecting,
    db_keys,
    envelope,
    expiry_commands,
    key_of,
    make_boundary,
    make_run,
    monitored,
    register,
    wait_until,
)

TTL_MS = 600_000
#: Reads of a record that refreshed its TTL would keep it for ever: only that reaches this.
HANG_S = 30


def record_key(tool_call_id: str = "call_1") -> str:
    return keys.record_key(key_of(tool_call_id))


def test_ttl_is_set_once_when_the_record_is_created(
    boundary: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a tool
    register(registry)
    # When a call goes all the way through (create, store raw, seal) and is read back
    with monitored(redis_client) as commands:
        outcome = boundary.invoke(envelope("call_1"), make_run(), timeout=5)
        boundary.outcome(RUN_ID, "call_1")
    # Then exactly one expiry command touched the record: the PEXPIRE of the create script
    assert outcome.status is InvocationStatus.READY
    on_record = [c for c in expiry_commands(commands) if record_key() in c]
    assert on_record == [f"pexpire {record_key()} {TTL_MS}"]


def test_reads_never_renew_the_ttl(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given a sealed record whose TTL has visibly run down
    register(registry)
    boundary.invoke(envelope("call_1"), make_run(), timeout=5)
    expiry = redis_client.pexpiretime(record_key())
    time.sleep(0.05)
    last = redis_client.pttl(record_key())
    # When it is read many times, by every read path, and its PTTL sampled after each read
    readers = [
        lambda: store.get(key_of("call_1")),
        lambda: boundary.outcome(RUN_ID, "call_1", timeout=1),
        lambda: boundary.observe(make_run()),
        lambda: store.progress(RUN_ID),
        lambda: store.run_summary(RUN_ID),
    ]
    with monitored(redis_client) as commands:
        for _ in range(30):
            for read in readers:
                read()
                # Then the remaining TTL never grows
                now = redis_client.pttl(record_key())
                assert 0 < now <= last
                last = now
    # And the absolute expiry never moved, and no expire/refresh command was issued at all
    assert redis_client.pexpiretime(record_key()) == expiry
    assert expiry_commands(commands) == []


def test_updates_keep_only_the_remaining_ttl(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a freshly created record
    key = create_projecting(store)
    expiry = redis_client.pexpiretime(record_key())
    ttls = [redis_client.pttl(record_key())]
    # When it is updated (raw stored, then sealed), with time passing between steps
    updates: list[Any] = [
        lambda: store.store_raw(key, '{"raw":1}'),
        lambda: store.seal(key, evidence_status=EvidenceStatus.EVIDENCE_FOUND, agent_result="1"),
    ]
    for update in updates:
        time.sleep(0.03)
        with monitored(redis_client) as commands:
            assert update() is WriteStatus.OK
        ttls.append(redis_client.pttl(record_key()))
        # Then no update touches the record's expiry
        assert [c for c in expiry_commands(commands) if record_key() in c] == []
    # And its PTTL only ever went down, never to -1, and the expiry time is the original one
    assert all(0 < later <= earlier for earlier, later in itertools.pairwise(ttls))
    assert redis_client.pexpiretime(record_key()) == expiry


def test_a_record_expires_on_time_however_often_it_is_read(
    redis_client: redis.Redis, registry: ToolRegistry
) -> None:
    # Given a call whose record lives 400 ms, and a later call of the run that lives on
    boundary, store = make_boundary(redis_client, registry, ttl_s=0.4)
    long_lived, _ = make_boundary(redis_client, registry)
    register(registry)
    assert boundary.invoke(envelope("call_1"), make_run(), timeout=5).status == "READY"
    assert long_lived.invoke(envelope("call_2"), make_run(), timeout=5).status == "READY"

    # When the first is read in a tight loop for longer than its TTL
    def gone() -> bool:
        if store.get(key_of("call_1")) is None:
            return True
        boundary.outcome(RUN_ID, "call_1")
        return False

    # Then it is gone (not kept alive by the reads: only a record the reads refresh is still
    # there after HANG_S)
    wait_until(gone, "call_1's record to expire while read", HANG_S, every=0)
    assert redis_client.exists(record_key()) == 0
    # And every read path now says so, while the later call still counts
    assert boundary.outcome(RUN_ID, "call_1").error_code is ErrorCode.RECORD_NOT_FOUND
    facts = boundary.observe(make_run())
    assert [f.tool_call_id for f in facts.facts] == ["call_2"]
    assert facts.excluded == {"expired": 1}


def test_run_keys_have_a_ttl(
    boundary: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a tool that samples the run's pending key while it runs
    pending: dict[str, int] = {}

    def sample(arguments: dict[str, Any]) -> None:
        pending["pttl"] = redis_client.pttl(keys.pending_key(RUN_ID))

    register(registry, FakeTool(during=sample))
    # When a call runs to completion
    boundary.invoke(envelope("call_1"), make_run(), timeout=5)
    # Then the pending set had a TTL while the call ran
    assert 0 < pending["pttl"] <= TTL_MS
    # And the budget and progress keys have one too, no longer than the record's TTL
    for key in (keys.budget_key(RUN_ID), keys.progress_key(RUN_ID)):
        assert 0 < redis_client.pttl(key) <= TTL_MS


def test_no_key_is_ever_left_without_a_ttl(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given successful, failing, duplicate, over-budget and still-running calls, and
    # writes aimed at records that are gone
    register(registry)
    register(registry, FakeTool(error=RuntimeError("boom")), name="broken")
    run = make_run(tools=("search", "broken"), max_tool_calls=4)
    boundary.invoke(envelope("ok"), run, timeout=5)
    boundary.invoke(envelope("bad", tool_name="broken"), run, timeout=5)
    boundary.invoke(envelope("ok"), run, timeout=5)  # duplicate
    running = create_projecting(store, "running", run_id="run-2")
    gone = create_projecting(store, "gone", run_id="run-3")
    redis_client.delete(keys.record_key(gone))
    store.store_raw(gone, "{}")
    store.seal_error(gone, ErrorCode.WORKER_LOST)
    boundary.invoke(envelope("ok2"), run, timeout=5)
    boundary.invoke(envelope("ok3"), run, timeout=5)  # over the run budget
    store.seal_error(running, ErrorCode.WORKER_LOST)
    # When every key in the DB is inspected
    found = db_keys(redis_client)
    # Then each one expires, within the TTL
    assert found
    for key in found:
        assert 0 < redis_client.pttl(key) <= TTL_MS, key
