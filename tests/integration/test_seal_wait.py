"""Sync seal notifications (``boundary.store.seal_wait``) and the project task's AsyncResult
answered from the record (``tasks.wiring.results``), on a real Redis."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator

import pytest
import redis
from celery.exceptions import TimeoutError as CeleryTimeoutError

from boundary import (
    CanonicalKey,
    ErrorCode,
    EvidenceStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolRegistry,
)
from boundary.call_steps import outcome_from_message, outcome_from_record
from boundary.store import keys, seal_channels
from boundary.store.seal_message import SealMessage
from boundary.store.seal_wait import NOTIFY_CLIENT_NAME, SyncSealNotifier
from tasks.wiring.app import create_app
from tasks.wiring.failures import ToolCallFailed
from tests.conftest import celery_test_settings
from tests.support.helpers import create_projecting, envelope, make_run, register

#: Long enough never to be reached in a passing test.
LONG_S = 30.0


def _notifier(store: RedisCanonicalStore, linger_s: float) -> SyncSealNotifier:
    pool = store.client.connection_pool  # type: ignore[union-attr]
    return SyncSealNotifier(
        lambda: pool.connection_class(**pool.connection_kwargs), linger_s=linger_s
    )


def _ready(store: RedisCanonicalStore, key: object) -> None:
    store.seal(key, evidence_status=EvidenceStatus.NO_EVIDENCE)  # type: ignore[arg-type]


def _subscribers(client: redis.Redis, channel: str) -> int:
    counts = dict(client.pubsub_numsub(channel))
    return int(counts.get(channel, 0))


def test_a_watch_made_before_the_seal_is_woken_by_it(store: RedisCanonicalStore) -> None:
    # Given a PROJECTING call and a confirmed watch on it
    key = create_projecting(store, "c1")
    watch = store.watch_seal(key)
    assert watch is not None
    with watch:
        assert watch.attach(LONG_S)
        assert store.get(key, with_raw=False).status.value == "PROJECTING"  # type: ignore[union-attr]
        # When another thread seals it
        sealer = threading.Thread(target=_ready, args=(store, key))
        sealer.start()
        # Then the wait is woken (not timed out) and the record says READY
        assert watch.wait(LONG_S)
        sealer.join()
        assert store.get(key, with_raw=False).status.value == "READY"  # type: ignore[union-attr]


def test_a_seal_of_another_call_of_the_run_does_not_wake_the_watch(
    store: RedisCanonicalStore,
) -> None:
    mine, other = create_projecting(store, "c1"), create_projecting(store, "c2")
    watch = store.watch_seal(mine)
    assert watch is not None
    with watch:
        watch.attach(LONG_S)
        _ready(store, other)
        # The other call's message came and went: this watch times out
        assert not watch.wait(0.2)
        _ready(store, mine)
        assert watch.wait(LONG_S)


def test_waiters_on_one_run_share_one_subscription_and_an_idle_one_is_dropped(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    notifier = _notifier(store, linger_s=0.0)
    channel = keys.sealed_channel(f"share-{secrets.token_hex(4)}")
    first, second = notifier.watch(channel, "c1"), notifier.watch(channel, "c2")
    assert first.attach(LONG_S) and second.attach(LONG_S)
    assert notifier.channels == 1
    assert _subscribers(redis_client, channel) == 1
    first.__exit__()
    second.__exit__()
    # The reader unsubscribes the idle channel and closes its connection
    sealer_client = redis_client
    for _ in range(200):
        if notifier.channels == 0 and _subscribers(sealer_client, channel) == 0:
            break
        threading.Event().wait(0.05)
    assert notifier.channels == 0
    assert _subscribers(redis_client, channel) == 0


def test_a_lone_waiter_reads_its_seal_itself_and_many_waiters_are_all_woken(
    store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    notifier = _notifier(store, linger_s=LONG_S)
    readers: dict[str, str] = {}  # tool_call_id -> the thread that read its seal message
    on_reply = notifier._on_reply

    def recorded(reply: object) -> None:
        if isinstance(reply, list) and len(reply) >= 3 and reply[0] in (b"message", "message"):
            data = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
            readers[data.split("\n", 1)[0]] = threading.current_thread().name
        on_reply(reply)

    monkeypatch.setattr(notifier, "_on_reply", recorded)
    # Given one waiter at a time on the run's channel, five times
    lone = [f"lone{n}" for n in range(5)]
    for call in lone:
        key = create_projecting(store, call)
        channel = keys.sealed_channel(key.run_id)
        watch = notifier.watch(channel, call)
        with watch:
            assert watch.attach(LONG_S)
            threading.Timer(0.1, _ready, args=(store, key)).start()
            assert watch.wait(LONG_S)
    # Then the seal messages were read by the waiting thread itself (no hand-off from the
    # reader thread); the reader may hold the connection for its own short drain step just
    # when one arrives, so not every one of the five need be, but without the lead none is
    assert {readers[call] for call in lone} <= {threading.current_thread().name, "tb-seal-reader"}
    assert threading.current_thread().name in {readers[call] for call in lone}
    # And when eight threads wait at once on calls of one run, sealed in reverse order
    calls = [f"m{n}" for n in range(8)]
    keys_ = [create_projecting(store, call) for call in calls]
    woken: dict[str, bool] = {}
    attached = threading.Barrier(len(calls) + 1)

    def wait_for(call: str) -> None:
        with notifier.watch(channel, call) as mine:
            mine.attach(LONG_S)
            attached.wait(LONG_S)
            woken[call] = mine.wait(LONG_S) and mine.sealed() is not None

    threads = [threading.Thread(target=wait_for, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    attached.wait(LONG_S)
    for k in reversed(keys_):
        _ready(store, k)
    for thread in threads:
        thread.join(LONG_S)
    # Then every one was woken by its own seal message
    assert woken == dict.fromkeys(calls, True)


def test_a_lost_connection_wakes_the_waiters_and_a_later_seal_still_wakes_them(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    key = create_projecting(store, "c1")
    watch = store.watch_seal(key)
    assert watch is not None
    with watch:
        assert watch.attach(LONG_S)
        woken = threading.Event()

        def wait_once() -> None:
            if watch.wait(LONG_S):
                woken.set()

        waiter = threading.Thread(target=wait_once)
        waiter.start()
        # When the notification connection is killed under the waiter (this store's: on its
        # DB, not another suite's on the same server)
        db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
        killed = [
            client["id"]
            for client in redis_client.client_list(_type="pubsub")
            if client["name"] == NOTIFY_CLIENT_NAME and str(client.get("db")) == db
        ]
        assert killed
        for client_id in killed:
            redis_client.client_kill_filter(_id=client_id)
        waiter.join(LONG_S)
        # Then it was woken (to re-read its record), not left hanging
        assert woken.is_set()
        # And the next wait subscribes again and is woken by the seal
        sealer = threading.Timer(0.2, _ready, args=(store, key))
        sealer.start()
        while store.get(key, with_raw=False).status.value == "PROJECTING":  # type: ignore[union-attr]
            assert watch.wait(LONG_S)
        sealer.join()


@pytest.fixture
def record_app(store: RedisCanonicalStore) -> Iterator[object]:
    app = create_app(celery_test_settings(), name="tests_record_results")
    from tasks.wiring import results

    with results._lock:
        results._stores[app] = store
    yield app


def test_async_result_of_a_project_task_reads_the_record(
    store: RedisCanonicalStore, record_app: object
) -> None:
    app = record_app
    ready, failed = create_projecting(store, "c1"), create_projecting(store, "c2")
    result = app.AsyncResult(ready.task_id("project"))  # type: ignore[attr-defined]
    # PENDING while PROJECTING; a bounded get times out
    assert result.state == "PENDING" and not result.ready()
    with pytest.raises(CeleryTimeoutError):
        result.get(timeout=0.1)
    # SUCCESS with the outcome once READY, woken by the seal
    threading.Timer(0.2, _ready, args=(store, ready)).start()
    value = result.get(timeout=LONG_S)
    assert value["status"] == "READY" and value["tool_call_id"] == "c1"
    assert result.state == "SUCCESS"
    # FAILURE carrying ToolCallFailed(<code>) once ERROR
    store.seal_error(failed, ErrorCode.TOOL_TIMEOUT)
    failure = app.AsyncResult(failed.task_id("project"))  # type: ignore[attr-defined]
    assert failure.state == "FAILURE"
    assert isinstance(failure.result, ToolCallFailed)
    assert failure.result.args == (ErrorCode.TOOL_TIMEOUT.value,)
    with pytest.raises(ToolCallFailed):
        failure.get(timeout=LONG_S)


class _SealWaiting:
    """A dispatcher that says it waits on the record's seal and never answers itself."""

    waits_on_seal = True

    def dispatch(self, key: CanonicalKey) -> None:
        raise AssertionError("not dispatched in this test")

    def wait(self, key: CanonicalKey, timeout: float | None) -> None:
        raise AssertionError("the boundary watches the seal itself")


def test_outcome_watches_the_seal_itself_when_the_dispatcher_would(
    store: RedisCanonicalStore, registry: ToolRegistry
) -> None:
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=_SealWaiting())
    key = create_projecting(store, "c1")
    # A wait that runs out returns the real state: still PROJECTING
    assert boundary.outcome(key.run_id, key.tool_call_id, timeout=0.1).pending
    # Sealed while waited on: woken, the record's outcome
    threading.Timer(0.2, _ready, args=(store, key)).start()
    outcome = boundary.outcome(key.run_id, key.tool_call_id, timeout=LONG_S)
    assert outcome.status.value == "READY" and outcome.tool_call_id == "c1"
    # Unknown ids: RECORD_NOT_FOUND, not a wait
    assert boundary.outcome(key.run_id, "nope", timeout=LONG_S).error_code is (
        ErrorCode.RECORD_NOT_FOUND
    )


def test_invoke_watches_the_seal_from_before_the_call_exists(
    store: RedisCanonicalStore, registry: ToolRegistry
) -> None:
    # Given a boundary whose dispatcher seals each call from another thread once dispatched
    sealed: list[CanonicalKey] = []

    class Sealing(_SealWaiting):
        def dispatch(self, key: CanonicalKey) -> None:
            sealed.append(key)
            threading.Timer(0.1, _ready, args=(store, key)).start()

    register(registry)
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=Sealing())
    run = make_run()
    # When calls are invoked one after another on one run
    outcomes = [boundary.invoke(envelope(f"i{n}"), run, timeout=LONG_S) for n in range(3)]
    # Then each is woken by its seal and answers the record's outcome
    assert [o.status.value for o in outcomes] == ["READY"] * 3
    assert [k.tool_call_id for k in sealed] == ["i0", "i1", "i2"]
    # And a call refused at preflight leaves no watch behind
    refused = boundary.invoke(envelope("bad", tool_name="nope"), run, timeout=LONG_S)
    assert refused.is_error


def test_the_seal_message_carries_the_bounded_outcome_and_nothing_raw(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a call whose raw response holds a secret, subscribed on its run's channel
    key = create_projecting(store, "c1")
    secret = f"sk-{secrets.token_hex(8)}"
    assert store.store_raw(key, f'{{"token":"{secret}"}}').value == "OK"
    listener = redis_client.pubsub()
    listener.subscribe(keys.sealed_channel(key.run_id))
    assert listener.get_message(timeout=LONG_S)["type"] == "subscribe"  # type: ignore[index]
    # When it is sealed READY with a bounded agent result and a scope
    store.seal(
        key,
        evidence_status=EvidenceStatus.EVIDENCE_FOUND,
        agent_result='{"answer":"line one\\nline two"}',
        scope='{"kind":"web"}',
    )
    message = listener.get_message(timeout=LONG_S)
    listener.close()
    assert message is not None and message["type"] == "message"
    data = str(message["data"])
    # Then the message is the outcome the sealed record gives, and nothing raw
    assert secret not in data and "tb:" not in data
    parsed = SealMessage.parse(data)
    assert parsed is not None and parsed.tool_call_id == "c1"
    record = store.get(key, with_raw=False)
    assert record is not None
    from_record = outcome_from_record(record)
    assert outcome_from_message(parsed, record) == from_record
    assert from_record is not None and from_record.result == {"answer": "line one\nline two"}
    # And a message is not trusted for a record created at another time, or one that may
    # have expired and been created again since the waiter subscribed
    other = record.model_copy(update={"created_at": record.created_at.replace(year=2001)})
    assert outcome_from_message(parsed, other) is None
    assert not parsed.current(watching_since=-parsed.ttl_ms / 1000.0, now=0.0)


def counted_reads(store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The status each read of a record (``store.get``) saw, from now on, in order."""
    reads: list[str] = []
    read = store.get

    def counted(k: CanonicalKey, **kw: object) -> object:
        got = read(k, **kw)  # type: ignore[arg-type]
        reads.append(got.status.value if got is not None else "MISSING")
        return got

    monkeypatch.setattr(store, "get", counted)
    return reads


def test_a_waiter_woken_by_the_seal_message_does_not_read_the_record_again(
    store: RedisCanonicalStore, registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=_SealWaiting())
    key = create_projecting(store, "c1")
    reads = counted_reads(store, monkeypatch)
    # Sealed ERROR while waited on: the outcome comes from the message
    threading.Timer(0.2, store.seal_error, args=(key, ErrorCode.TOOL_TIMEOUT)).start()
    outcome = boundary.outcome(key.run_id, key.tool_call_id, timeout=LONG_S)
    assert outcome.error_code is ErrorCode.TOOL_TIMEOUT and outcome.tool_call_id == "c1"
    # Reads before and after subscribing saw it PROJECTING; none after the message
    assert reads == ["PROJECTING", "PROJECTING"]
    # A late waiter (the seal came before it looked) still gets it, from its read
    reads.clear()
    late = boundary.outcome(key.run_id, key.tool_call_id, timeout=LONG_S)
    assert late == outcome and reads == ["ERROR"]


def test_an_outcome_after_submit_on_a_watched_run_needs_no_read(
    store: RedisCanonicalStore, registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a boundary whose dispatcher seals each call once dispatched: a moment later
    # (READY), or before submit returns (ERROR)
    class Sealing(_SealWaiting):
        at_once = False

        def dispatch(self, key: CanonicalKey) -> None:
            if self.at_once:
                store.seal_error(key, ErrorCode.TOOL_TIMEOUT)
            else:
                threading.Timer(0.1, _ready, args=(store, key)).start()

    register(registry)
    dispatcher = Sealing()
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=dispatcher)
    run = make_run()
    reads = counted_reads(store, monkeypatch)
    # The run's first call: nobody watched its channel when it was created, so it is read
    assert boundary.submit(envelope("s0"), run).accepted
    assert boundary.outcome(run.run_id, "s0", timeout=LONG_S).status.value == "READY"
    assert reads == ["PROJECTING", "PROJECTING"]
    # When the next calls are created while the run's channel is still subscribed
    reads.clear()
    assert boundary.submit(envelope("s1"), run).accepted
    ready = boundary.outcome(run.run_id, "s1", timeout=LONG_S)
    dispatcher.at_once = True
    assert boundary.submit(envelope("s2"), run).accepted
    failed = boundary.outcome(run.run_id, "s2", timeout=LONG_S)
    # Then each outcome comes from its seal message (held when it came first): no read
    assert ready.status.value == "READY" and ready.tool_call_id == "s1"
    assert failed.error_code is ErrorCode.TOOL_TIMEOUT and failed.tool_call_id == "s2"
    assert reads == []
    # And a refused call (the same id again) is not taken for the sealed one's new record
    assert boundary.submit(envelope("s2"), run).outcome.error_code is (  # type: ignore[union-attr]
        ErrorCode.DUPLICATE_TOOL_CALL
    )
    assert boundary.outcome(run.run_id, "s2", timeout=LONG_S) == failed


def test_a_project_tasks_async_result_woken_by_the_seal_message_reads_no_more(
    store: RedisCanonicalStore, record_app: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = create_projecting(store, "c1")
    seen = counted_reads(store, monkeypatch)
    result = record_app.AsyncResult(key.task_id("project"))  # type: ignore[attr-defined]
    threading.Timer(0.2, _ready, args=(store, key)).start()
    value = result.get(timeout=LONG_S)
    # The seal message's outcome, with no read after it
    assert value["status"] == "READY" and value["tool_call_id"] == "c1"
    assert seen and set(seen) == {"PROJECTING"}


def test_a_channel_keeps_covered_calls_messages_within_its_caps() -> None:
    state = seal_channels.SealChannel()
    for n in range(seal_channels.RECENT_MAX + 1):
        state.covered[f"k{n}"] = 0.0
        state.keep(f"k{n}", f"k{n}\nmessage")
    # The oldest message went past the count cap, and its call is no longer covered (read)
    assert len(state.recent) == seal_channels.RECENT_MAX and "k0" not in state.recent
    assert "k0" not in state.covered and "k1" in state.covered
    # A message past the size cap pushes the others out, then itself
    state.covered["big"] = 0.0
    state.keep("big", "big\n" + "x" * seal_channels.RECENT_MAX_CHARS)
    assert state.recent == {} and state.recent_chars == 0 and "big" not in state.covered
