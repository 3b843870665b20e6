"""The Redis canonical store on real Redis: the lifecycle table, conditional writes that never
re-create a key, and driver errors that never cross the store's boundary."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from boundary import (
    CanonicalKey,
    ErrorCode,
    EvidenceStatus,
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    StoreError,
    StoreUnavailable,
    ToolBoundary,
    ToolRegistry,
)
from boundary.store import CreateStatus, WriteStatus, keys
from boundary.store._redis_common import StoreScript
from tests.support.helpers import (
    RUN_ID,
    create_projecting,
    create_terms,
    envelope,
    key_of,
    make_run,
    monitored,
    register,
    snapshot,
)

FOUND = EvidenceStatus.EVIDENCE_FOUND


def seal_ready(store: RedisCanonicalStore, key: CanonicalKey) -> WriteStatus:
    return store.seal(key, evidence_status=FOUND, agent_result='{"n":1}', scope='{"q":"x"}')


def test_create_writes_one_projecting_record_with_a_run_sequence(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given an empty store
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    # When two calls of the run are created
    results = [
        store.create(key_of(call_id), **create_terms(request='{"q":"é"}', deadline=deadline))
        for call_id in ("call_1", "call_2")
    ]
    # Then each is CREATED with the next sequence number, PROJECTING, with a TTL
    assert [(r.status, r.seq) for r in results] == [
        (CreateStatus.CREATED, 1),
        (CreateStatus.CREATED, 2),
    ]
    record = store.get(key_of("call_2"))
    assert record is not None
    assert record.status is InvocationStatus.PROJECTING
    assert record.request == '{"q":"é"}'
    assert record.seq == 2
    assert record.deadline is not None
    assert abs((record.deadline - deadline).total_seconds()) < 0.002
    assert 0 < redis_client.pttl(keys.record_key(key_of("call_2"))) <= 600_000
    # And both wait in the run's pending set for the reaper, none yet in the progress set
    assert redis_client.zcard(keys.pending_key(RUN_ID)) == 2
    assert not redis_client.exists(keys.progress_key(RUN_ID))


def test_create_refuses_a_duplicate_without_touching_anything(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a created call
    key = create_projecting(store)
    record = snapshot(redis_client, keys.record_key(key))
    budget = redis_client.hgetall(keys.budget_key(RUN_ID))
    # When it is created again, for another tool
    result = store.create(key, **create_terms(tool_name="other", max_pending_s=0))
    # Then it is a conflicting duplicate and nothing changed
    assert result.status is CreateStatus.CONFLICT
    assert result.seq is None
    assert snapshot(redis_client, keys.record_key(key)) == record
    assert redis_client.hgetall(keys.budget_key(RUN_ID)) == budget


@pytest.mark.parametrize("evidence", [EvidenceStatus.EVIDENCE_FOUND, EvidenceStatus.NO_EVIDENCE])
def test_seal_ready_from_projecting(
    store: RedisCanonicalStore, redis_client: redis.Redis, evidence: EvidenceStatus
) -> None:
    # Given a PROJECTING record with its raw response
    key = create_projecting(store)
    assert store.store_raw(key, '{"raw":true}') is WriteStatus.OK
    # When it is sealed READY with found-or-no evidence
    written = store.seal(key, evidence_status=evidence, agent_result="[1]", scope='{"q":1}')
    # Then it is READY with its result, indexed in progress and no longer pending
    assert written is WriteStatus.OK
    record = store.get(key)
    assert record is not None
    assert (record.status, record.evidence_status) == (InvocationStatus.READY, evidence)
    assert (record.raw, record.agent_result, record.scope) == ('{"raw":true}', "[1]", '{"q":1}')
    assert [entry.key for entry in store.progress(RUN_ID)] == [key]
    assert redis_client.zcard(keys.pending_key(RUN_ID)) == 0
    summary = store.run_summary(RUN_ID)
    assert summary is not None
    assert (summary.calls, summary.ready, summary.error, summary.projecting) == (1, 1, 0, 0)


def test_progress_many_reads_many_runs_in_two_round_trips_as_progress_reads_each(
    store: RedisCanonicalStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 30 runs of three READY calls, and a run with nothing indexed
    runs = [f"run-m{n}" for n in range(30)]
    for run_id in runs:
        for call_id in ("c1", "c2", "c3"):
            key = create_projecting(store, call_id, run_id=run_id)
            store.store_raw(key, '{"raw":1}')
            seal_ready(store, key)
    round_trips = []
    real_execute = redis.client.Pipeline.execute

    def counted(pipe: Any, *args: Any, **kwargs: Any) -> Any:
        round_trips.append(len(pipe.command_stack))
        return real_execute(pipe, *args, **kwargs)

    # When they are read together (the empty run and a repeated id among them)
    monkeypatch.setattr(redis.client.Pipeline, "execute", counted)
    many = store.progress_many([*runs, "run-empty", runs[0]])
    monkeypatch.undo()

    # Then two pipelines did it: 31 ZRANGEs of progress and 31 of pending, then the 90 records
    # in one read_records.lua per run that has any
    assert round_trips == [62, 30]
    assert list(many) == [*runs, "run-empty"]
    assert many["run-empty"] == []
    for run_id in runs:
        assert many[run_id] == store.progress(run_id)
        assert [e.key.tool_call_id for e in many[run_id] if e.key] == ["c1", "c2", "c3"]
        assert all(e.record is not None and e.record.raw is None for e in many[run_id])


def test_progress_many_reads_again_after_the_server_lost_its_scripts(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a READY call, read once (the record script is cached by the server)
    key = create_projecting(store, "c1", run_id="run-flushed")
    store.store_raw(key, '{"raw":1}')
    seal_ready(store, key)
    before = store.progress_many(["run-flushed"])

    # When the server forgets its scripts (a restart, a failover, SCRIPT FLUSH)
    redis_client.script_flush()
    after = store.progress_many(["run-flushed"])

    # Then the read loads the script again and reads the same record
    assert after == before
    (entry,) = after["run-flushed"]
    assert entry.record is not None and entry.record.status is InvocationStatus.READY


def test_each_step_of_a_call_loads_its_script_again_after_the_server_lost_them(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a server that forgot every script (a restart, a failover, SCRIPT FLUSH), whose
    # script runs go out as single EVALSHA commands (StoreScript)
    assert isinstance(store._seal, StoreScript)
    redis_client.script_flush()
    # When a call is created, claimed, its response kept and sealed
    key = create_projecting(store, "flushed", run_id="run-scripts-flushed")
    assert store.claim(key, attempt=1, heartbeat_timeouts={}).record is not None
    redis_client.script_flush()
    assert store.store_raw(key, '{"raw":1}', attempt=1) is WriteStatus.OK
    redis_client.script_flush()
    with monitored(redis_client, round_trips=True) as commands:
        sealed = seal_ready(store, key)
    # Then each step loaded its script again and did its work
    assert sealed is WriteStatus.OK
    record = store.get(key)
    assert record is not None and record.status is InvocationStatus.READY
    # And the refused script was sent once, loaded, and sent again: three round trips
    sent = [c.split()[:2] for c in commands if c.split()[0] not in ("select", "client", "hello")]
    assert sent == [["evalsha", store._seal.sha], ["script", "load"], ["evalsha", store._seal.sha]]


def test_run_summaries_reads_many_runs_per_round_trip_and_leaves_unknown_ones_out(
    store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 5 runs: two calls each, the first sealed READY, the second still PROJECTING
    runs = [f"run-s{n}" for n in range(5)]
    for run_id in runs:
        done = create_projecting(store, "c1", run_id=run_id)
        store.store_raw(done, '{"raw":1}')
        seal_ready(store, done)
        create_projecting(store, "c2", run_id=run_id)
    round_trips = []
    real_execute = redis.client.Pipeline.execute

    def counted(pipe: Any, *args: Any, **kwargs: Any) -> Any:
        round_trips.append(len(pipe.command_stack))
        return real_execute(pipe, *args, **kwargs)

    # When they are summarised with an unknown run among them, in batches of 2
    monkeypatch.setattr("boundary.store.redis.SUMMARY_BATCH", 2)
    monkeypatch.setattr(redis.client.Pipeline, "execute", counted)
    summaries = store.run_summaries([runs[0], "run-nobody", *runs[1:]])
    monkeypatch.undo()

    # Then one pipeline per batch of 2 runs (2 commands each), the unknown run left out
    assert round_trips == [4, 4, 4]
    assert [s.run_id for s in summaries] == runs
    assert all((s.calls, s.ready, s.error, s.projecting) == (2, 1, 0, 1) for s in summaries)
    assert summaries == [store.run_summary(run_id) for run_id in runs]


def test_seal_error_from_projecting(store: RedisCanonicalStore) -> None:
    # Given a PROJECTING record
    key = create_projecting(store)
    # When it is sealed ERROR
    written = store.seal_error(key, ErrorCode.TOOL_TIMEOUT)
    # Then it is ERROR/ERROR with the code, and counted as such
    assert written is WriteStatus.OK
    record = store.get(key)
    assert record is not None
    assert record.status is InvocationStatus.ERROR
    assert record.evidence_status is EvidenceStatus.ERROR
    assert record.error_code is ErrorCode.TOOL_TIMEOUT
    summary = store.run_summary(RUN_ID)
    assert summary is not None
    assert (summary.ready, summary.error) == (0, 1)


SEALS: dict[str, Callable[[RedisCanonicalStore, CanonicalKey], WriteStatus]] = {
    "READY": seal_ready,
    "ERROR": lambda store, key: store.seal_error(key, ErrorCode.PROJECTION_FAILED),
}


@pytest.mark.parametrize(
    ("first", "then"),
    [("READY", "ERROR"), ("ERROR", "READY"), ("READY", "READY"), ("ERROR", "ERROR")],
)
def test_seal_only_from_projecting(
    store: RedisCanonicalStore, redis_client: redis.Redis, first: str, then: str
) -> None:
    # Given a sealed record
    key = create_projecting(store)
    assert SEALS[first](store, key) is WriteStatus.OK
    before = snapshot(redis_client, keys.record_key(key))
    progress = redis_client.zrange(keys.progress_key(RUN_ID), 0, -1, withscores=True)
    budget = redis_client.hgetall(keys.budget_key(RUN_ID))
    # When it is sealed again
    written = SEALS[then](store, key)
    # Then the store refuses, and the record, the progress index and counters are unchanged
    assert written is WriteStatus.NOT_PROJECTING
    assert snapshot(redis_client, keys.record_key(key)) == before
    assert redis_client.zrange(keys.progress_key(RUN_ID), 0, -1, withscores=True) == progress
    assert redis_client.hgetall(keys.budget_key(RUN_ID)) == budget


@pytest.mark.parametrize(
    "seal",
    [
        # READY needs EVIDENCE_FOUND or NO_EVIDENCE
        {"evidence_status": EvidenceStatus.ERROR, "agent_result": "1"},
        # An error code means ERROR, which needs evidence ERROR
        {"evidence_status": EvidenceStatus.EVIDENCE_FOUND, "error_code": ErrorCode.TOOL_TIMEOUT},
        {"evidence_status": EvidenceStatus.NO_EVIDENCE, "error_code": ErrorCode.TOOL_TIMEOUT},
        # ERROR never carries an agent result
        {
            "evidence_status": EvidenceStatus.ERROR,
            "error_code": ErrorCode.TOOL_TIMEOUT,
            "agent_result": '{"leak":1}',
        },
    ],
    ids=["ready_with_error_evidence", "error_with_found", "error_with_none", "error_with_result"],
)
def test_seal_that_breaks_the_lifecycle_table_is_refused(
    store: RedisCanonicalStore, redis_client: redis.Redis, seal: dict[str, Any]
) -> None:
    # Given a PROJECTING record
    key = create_projecting(store)
    before = snapshot(redis_client, keys.record_key(key))
    # When it is sealed with a combination the lifecycle table forbids
    # Then the store refuses (a caller bug, not data) and writes nothing
    with pytest.raises(ValueError):
        store.seal(key, **seal)
    assert snapshot(redis_client, keys.record_key(key)) == before
    assert not redis_client.exists(keys.progress_key(RUN_ID))


def test_store_raw_only_once_and_only_while_projecting(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a PROJECTING record
    key = create_projecting(store)
    # When raw data is stored, then stored again
    first = store.store_raw(key, '{"v":1}')
    second = store.store_raw(key, '{"v":2}')
    # Then the first is kept and the second refused
    assert (first, second) == (WriteStatus.OK, WriteStatus.ALREADY_STORED)
    record = store.get(key)
    assert record is not None
    assert record.raw == '{"v":1}'
    # When the record is sealed and raw data is stored once more
    assert seal_ready(store, key) is WriteStatus.OK
    before = snapshot(redis_client, keys.record_key(key))
    # Then it is refused as not PROJECTING, and nothing changed
    assert store.store_raw(key, '{"v":3}') is WriteStatus.NOT_PROJECTING
    assert snapshot(redis_client, keys.record_key(key)) == before


def test_get_on_a_missing_key_is_none(store: RedisCanonicalStore) -> None:
    # Given an empty store
    # When a record is read
    # Then there is none
    assert store.get(key_of("nothing")) is None
    assert store.progress(RUN_ID) == []
    assert store.run_summary(RUN_ID) is None


#: The store's writes on an existing record, by name.
WRITES: dict[str, Callable[[RedisCanonicalStore, CanonicalKey], WriteStatus]] = {
    "store_raw": lambda store, key: store.store_raw(key, '{"v":1}'),
    "seal_ready": seal_ready,
    "seal_error": lambda store, key: store.seal_error(key, ErrorCode.WORKER_LOST),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_writes_on_a_missing_key_do_not_recreate_it(
    store: RedisCanonicalStore, redis_client: redis.Redis, write: str
) -> None:
    # Given a record that was deleted
    key = create_projecting(store)
    redis_client.delete(keys.record_key(key))
    # When it is written to
    written = WRITES[write](store, key)
    # Then the write reports MISSING and the key stays absent (no immortal half record)
    assert written is WriteStatus.MISSING
    assert redis_client.exists(keys.record_key(key)) == 0
    assert not redis_client.exists(keys.progress_key(RUN_ID))


@pytest.mark.parametrize("write", list(WRITES))
def test_writes_on_an_expired_key_do_not_recreate_it(redis_client: redis.Redis, write: str) -> None:
    # Given a record with a 50 ms TTL that has expired
    store = RedisCanonicalStore(client=redis_client, ttl_s=0.05)
    key = create_projecting(store)
    time.sleep(0.12)
    assert store.get(key) is None
    # When it is written to
    written = WRITES[write](store, key)
    # Then the write reports MISSING and EXISTS stays 0
    assert written is WriteStatus.MISSING
    assert redis_client.exists(keys.record_key(key)) == 0
    assert redis_client.pttl(keys.record_key(key)) == -2


def test_due_pending_lists_calls_past_their_reap_time(store: RedisCanonicalStore) -> None:
    # Given one call due for the reaper and one not yet, and one already sealed
    now = datetime.now(UTC)
    for call_id, deadline in (
        ("due", now - timedelta(seconds=1)),
        ("later", None),
    ):
        store.create(key_of(call_id), **create_terms(deadline=deadline))
    sealed = create_projecting(store, "sealed")
    store.seal_error(sealed, ErrorCode.TOOL_TIMEOUT)
    # When the due calls are listed
    due = store.due_pending(now)
    # Then only the PROJECTING call past its reap time is due
    assert due == [key_of("due")]
    assert set(store.run_ids()) == {RUN_ID}


def test_a_record_this_code_did_not_write_is_a_store_error(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a hash at a record key that lacks the record's fields
    key = key_of("call_1")
    redis_client.hset(keys.record_key(key), mapping={"status": "READY", "raw": "x"})
    # When it is read
    # Then the store refuses to guess: a StoreError, not a validation or driver error
    with pytest.raises(StoreError):
        store.get(key)


def test_a_wrong_type_at_a_key_is_a_store_error_not_a_driver_error(
    store: RedisCanonicalStore, redis_client: redis.Redis, registry: ToolRegistry
) -> None:
    # Given a plain string where the run's budget hash should be
    redis_client.set(keys.budget_key(RUN_ID), "not a hash")
    key = key_of("call_1")
    # When the store creates a call of that run
    # Then the Redis error becomes our StoreError
    with pytest.raises(StoreError) as caught:
        create_projecting(store)
    assert not isinstance(caught.value, redis.RedisError)
    assert str(caught.value) == "STORE_UNAVAILABLE"
    # And through the boundary the agent sees STORE_UNAVAILABLE
    tool, _ = register(registry)
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry, inline=True)
    )
    submission = boundary.submit(envelope("call_1"), make_run())
    assert submission.outcome is not None
    assert submission.outcome.error_code is ErrorCode.STORE_UNAVAILABLE
    assert tool.calls.value == 0
    assert not redis_client.exists(keys.record_key(key))


# An unreachable store: nothing listens on port 1.
UNREACHABLE_URL = "redis://:hunter2@127.0.0.1:1/0"

STORE_CALLS: dict[str, Callable[[RedisCanonicalStore], Any]] = {
    "create": create_projecting,
    "store_raw": lambda s: s.store_raw(key_of("c"), "{}"),
    "seal": lambda s: seal_ready(s, key_of("c")),
    "seal_error": lambda s: s.seal_error(key_of("c"), ErrorCode.WORKER_LOST),
    "get": lambda s: s.get(key_of("c")),
    "progress": lambda s: s.progress(RUN_ID),
    "due_pending": lambda s: s.due_pending(datetime.now(UTC)),
    "run_ids": lambda s: list(s.run_ids()),
    "run_summary": lambda s: s.run_summary(RUN_ID),
    "ping": lambda s: s.ping(),
}


@pytest.fixture
def unreachable() -> RedisCanonicalStore:
    return RedisCanonicalStore.from_url(UNREACHABLE_URL)


@pytest.mark.parametrize("method", sorted(STORE_CALLS))
def test_unreachable_store_raises_store_unavailable(
    unreachable: RedisCanonicalStore, method: str
) -> None:
    # Given a store whose Redis cannot be reached
    # When any public method is called
    with pytest.raises(StoreUnavailable) as caught:
        STORE_CALLS[method](unreachable)
    # Then it raises our StoreUnavailable, which says only its code: no URL, no password,
    # and no driver exception chained for a traceback to print
    error = caught.value
    assert not isinstance(error, redis.RedisError)
    assert str(error) == "STORE_UNAVAILABLE"
    assert "hunter2" not in repr(error)
    assert "127.0.0.1" not in repr(error)
    assert error.__cause__ is None
    assert error.__suppress_context__ is True
    assert error.code is ErrorCode.STORE_UNAVAILABLE


def test_submit_on_an_unreachable_store_returns_store_unavailable(
    unreachable: RedisCanonicalStore, registry: ToolRegistry
) -> None:
    # Given a boundary on a store that cannot be reached
    tool, projector = register(registry)
    boundary = ToolBoundary(
        store=unreachable,
        registry=registry,
        dispatcher=InProcessDispatcher(unreachable, registry, inline=True),
    )
    # When a valid call is submitted
    submission = boundary.submit(envelope("call_1"), make_run())
    # Then a safe STORE_UNAVAILABLE outcome comes back and no tool ran
    assert submission.accepted is False
    assert submission.outcome is not None
    assert submission.outcome.error_code is ErrorCode.STORE_UNAVAILABLE
    assert submission.outcome.status is InvocationStatus.ERROR
    assert "hunter2" not in submission.model_dump_json()
    assert tool.calls.value == 0
    assert projector.calls.value == 0
    # And outcome() answers the same way instead of raising a driver error
    outcome = boundary.outcome(RUN_ID, "call_1", timeout=1)
    assert outcome.error_code is ErrorCode.STORE_UNAVAILABLE
    # And observe() raises only our StoreUnavailable
    with pytest.raises(StoreUnavailable):
        boundary.observe(make_run())
