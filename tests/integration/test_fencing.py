"""Fenced attempts on real Redis: the attempt is the call's fencing token. A holder whose call
another attempt took over (its worker paused past its lease, the fleet reclaimed it) is refused
every step in the same script that checks the token: heartbeat, raw response, seal, slot
release. And the reaper acts only on what is still due when its step runs."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
import redis
from pydantic import ValidationError

from boundary import (
    CanonicalKey,
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
    ToolSpec,
    heartbeat,
)
from boundary.flow import RELEASE_STALE, Flow
from boundary.reaper import Retries, reap_once
from boundary.steps import ExecuteResult, execute_step, send_attempt
from boundary.store import WriteStatus, keys
from boundary.store.flow import FlowStanding, ToolLimits
from tests.support import otel
from tests.support.helpers import EchoProjector, FakeTool, create_projecting, create_terms, key_of


class Recorder:
    """A sender that records what it was asked to send."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def send_attempt(
        self, key: CanonicalKey, *, attempt: int, queue: str, countdown_s: float = 0.0
    ) -> None:
        self.sent.append((key.tool_call_id, attempt))

    def dispatch(self, key: CanonicalKey) -> None:
        self.send_attempt(key, attempt=1, queue="tools")

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


def stale_refusals(redis_client: redis.Redis, key: CanonicalKey) -> int:
    return int(redis_client.hget(keys.record_key(key), "stale_refusals") or 0)


def take_over(store: RedisCanonicalStore, key: CanonicalKey, attempt: int) -> int:
    """What the fleet does with a holder it judged lost: the next attempt takes the call."""
    moved = store.retry_attempt(key, attempt=attempt, reap_after_s=3600, reap_grace_s=60)
    assert isinstance(moved, int)
    return moved


# --- the record's steps -----------------------------------------------------------------------


def test_every_step_of_a_stale_attempt_is_refused_and_counted(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a call whose attempt 1 started and was then taken over by attempt 2
    key = create_projecting(store, "fenced")
    assert store.claim(key, attempt=1, heartbeat_timeouts={}).record is not None
    assert take_over(store, key, 1) == 2

    # When attempt 1 goes on: heartbeat, raw response, seal
    beat = store.heartbeat(key, attempt=1, progress=0.5, message="late", heartbeat_timeout_s=None)
    raw = store.store_raw(key, '{"stale": true}', attempt=1)
    sealed = store.seal(
        key, evidence_status=EvidenceStatus.EVIDENCE_FOUND, agent_result="{}", attempt=1
    )
    failed = store.seal_error(key, ErrorCode.TOOL_TIMEOUT, attempt=1)

    # Then each is refused, nothing of it is written, and each refusal is counted
    assert [beat, raw, sealed, failed] == [WriteStatus.SUPERSEDED] * 4
    record = store.get(key)
    assert record is not None
    assert (record.status, record.raw, record.attempt) == (InvocationStatus.PROJECTING, None, 2)
    assert record.progress is None
    assert stale_refusals(redis_client, key) == 4
    # And the current attempt's steps are its own
    assert store.claim(key, attempt=2, heartbeat_timeouts={}).record is not None
    assert store.store_raw(key, '{"fresh": true}', attempt=2) is WriteStatus.OK
    assert (
        store.seal(key, evidence_status=EvidenceStatus.EVIDENCE_FOUND, agent_result="{}", attempt=2)
        is WriteStatus.OK
    )


def test_a_seal_without_an_attempt_is_not_fenced(store: RedisCanonicalStore) -> None:
    # A cancel, a projection, the reaper: steps that hold no attempt seal as before
    key = create_projecting(store, "unfenced")
    take_over(store, key, 1)
    assert store.seal_error(key, ErrorCode.CANCELLED) is WriteStatus.OK


# --- the execute step --------------------------------------------------------------------------


def registry_of(executor: Any) -> ToolRegistry:
    return ToolRegistry(
        [ToolSpec(name="search", executor=executor, projector=EchoProjector(), read_only=True)]
    )


def test_a_stale_holder_that_returns_keeps_nothing_and_is_counted_once(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a tool whose call is taken over while it runs (its worker paused past its lease)
    otel.install()
    before = otel.count("tool_boundary.stale_holders", tool="search")
    key = create_projecting(store, "returns", tool_name="search")
    tool = FakeTool({"stale": True}, during=lambda _: take_over(store, key, 1))

    # When it comes back with its response
    ended = execute_step(store, registry_of(tool), key, attempt=1)

    # Then the response is dropped: the call waits for attempt 2, and the holder is counted
    assert ended is ExecuteResult.HANDED_ON
    record = store.get(key)
    assert record is not None
    assert (record.status, record.raw, record.attempt) == (InvocationStatus.PROJECTING, None, 2)
    assert stale_refusals(redis_client, key) == 1
    assert otel.count("tool_boundary.stale_holders", tool="search") - before == 1


def test_a_stale_holder_that_fails_does_not_seal_the_call(store: RedisCanonicalStore) -> None:
    key = create_projecting(store, "fails", tool_name="search")

    def fail_late(_: dict[str, Any]) -> None:
        take_over(store, key, 1)
        raise RuntimeError("the tool failed after its call was taken over")

    assert execute_step(store, registry_of(fail_late), key, attempt=1) is ExecuteResult.HANDED_ON
    record = store.get(key)
    assert record is not None and record.status is InvocationStatus.PROJECTING


def test_a_stale_holder_learns_at_its_next_heartbeat_and_is_counted_once(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    otel.install()
    before = otel.count("tool_boundary.stale_holders", tool="search")
    key = create_projecting(store, "beats", tool_name="search")
    beats: list[str] = []

    def beat_on(_: dict[str, Any]) -> dict[str, Any]:
        take_over(store, key, 1)
        try:
            heartbeat(0.5)
        except Exception as exc:
            beats.append(type(exc).__name__)
        # A tool that swallows the stop and returns anyway keeps nothing either
        return {"stale": True}

    assert execute_step(store, registry_of(beat_on), key, attempt=1) is ExecuteResult.HANDED_ON
    assert beats == ["CallCancelled"]
    record = store.get(key)
    assert record is not None and (record.raw, record.attempt) == (None, 2)
    assert stale_refusals(redis_client, key) == 1  # the heartbeat; no store step after it
    assert otel.count("tool_boundary.stale_holders", tool="search") - before == 1


# --- the slot ---------------------------------------------------------------------------------

RUN = RunContext(run_id="run-fence", authorized_tools=frozenset({"one"}))


def limited() -> ToolRegistry:
    return ToolRegistry(
        [
            ToolSpec(
                name="one",
                executor=FakeTool({"x": 1}),
                projector=EchoProjector(),
                read_only=True,
                concurrency=1,
            )
        ]
    )


def envelope(call_id: str) -> ToolCallEnvelope:
    return ToolCallEnvelope(run_id=RUN.run_id, tool_call_id=call_id, tool_name="one", arguments={})


def test_a_stale_holder_never_gives_up_the_slot_its_call_holds_now(
    store: RedisCanonicalStore,
) -> None:
    # Given a tool with one slot: a1 holds it (attempt 1), and a2 waits
    registry, recorder = limited(), Recorder()
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=recorder)
    flow = store.flow
    assert isinstance(flow, Flow)
    assert boundary.submit(envelope("a1"), RUN).accepted
    assert boundary.submit(envelope("a2"), RUN).accepted
    first = CanonicalKey(run_id=RUN.run_id, tool_call_id="a1")
    assert recorder.sent == [("a1", 1)]
    assert store.claim(first, attempt=1, heartbeat_timeouts={}).record is not None
    # And a1's attempt 1 was judged lost: attempt 2 takes the call over and gets in line
    # behind a2, which is handed the slot
    moved = take_over(store, first, 1)
    spec = registry.get("one")
    send_attempt(store, recorder, first, spec, attempt=moved, countdown_s=0, keep=False)
    assert recorder.sent == [("a1", 1), ("a2", 1)]
    limits = ToolLimits(concurrency=1)

    # When the stale attempt 1 resumes and tries to end the call and give its slot up
    sealed = store.seal_error(first, ErrorCode.TOOL_TIMEOUT, attempt=1)
    released = flow.release(first, "one", limits, attempt=1)

    # Then both are refused: a2 keeps the slot, attempt 2 of a1 keeps its place in line
    assert sealed is WriteStatus.SUPERSEDED
    assert released.code == RELEASE_STALE
    state = flow.ops.state("one", limits, first)
    assert (state.standing, state.attempt) == (FlowStanding.WAITS, 2)
    assert recorder.sent == [("a1", 1), ("a2", 1)]
    # And a stale holder of a limited tool is counted in its flow control
    assert flow.status("one").stale_holders == 0
    store.flow.stale_holder("one")  # (what the execute step does when it is refused)
    assert flow.status("one").stale_holders == 1
    # And a2's seal hands the slot to a1's attempt 2
    second = CanonicalKey(run_id=RUN.run_id, tool_call_id="a2")
    assert store.seal_error(second, ErrorCode.CANCELLED, attempt=1) is WriteStatus.OK
    assert recorder.sent[-1] == ("a1", 2)
    # And a stale move of the call to an older attempt leaves attempt 2 its slot
    assert flow.ops.requeue("one", limits, first, attempt=1, keep=False).code == RELEASE_STALE
    state = flow.ops.state("one", limits, first)
    assert (state.standing, state.attempt) == (FlowStanding.HOLDS, 2)


# --- the reaper acts only on what is still due -------------------------------------------------


class ClaimedMeanwhile(RedisCanonicalStore):
    """A store whose due list is read, and then each call on it is granted and claimed by a
    worker, before the reaper's pass goes on (deterministically, the race of a pass that
    walks a long list)."""

    def due_pending(self, now: datetime | None = None, limit: int = 1000) -> list[CanonicalKey]:
        due = super().due_pending(now, limit)
        for key in due:
            assert self.claim(key, attempt=1, heartbeat_timeouts={}).record is not None
        return due


def test_the_reaper_leaves_a_call_that_started_after_it_read_its_due_list(
    redis_client: redis.Redis,
) -> None:
    # Given a call past its reap time (it waited long for a slot)
    store = ClaimedMeanwhile(client=redis_client, ttl_s=600)
    key = key_of("meanwhile", "run-reap")
    assert store.create(key, **create_terms(max_pending_s=0, reap_grace_s=0)).status.value == (
        "CREATED"
    )

    # When the reaper reads its list, the call starts, and the pass goes on (no retries)
    reaped = reap_once(store, lambda _: None, retry_after_s=60, max_reprojections=2)

    # Then the running call is left alone: not sealed WORKER_LOST
    assert reaped.due == 1
    assert reaped.sealed == 0
    record = store.get(key)
    assert record is not None
    assert (record.status, record.attempt) == (InvocationStatus.PROJECTING, 1)


def test_the_reaper_does_not_retry_a_call_that_started_after_it_read_its_due_list(
    redis_client: redis.Redis,
) -> None:
    store = ClaimedMeanwhile(client=redis_client, ttl_s=600)
    key = key_of("meanwhile-retry", "run-reap")
    store.create(key, **create_terms(max_pending_s=0, reap_grace_s=0))
    sender = Recorder()
    retries = Retries(
        registry=ToolRegistry(),
        sender=sender,
        max_redispatches=3,
        max_pending_s=60,
        reap_grace_s=0,
    )

    reaped = reap_once(
        store, lambda _: None, retry_after_s=60, max_reprojections=2, retries=retries
    )

    assert (reaped.sealed, reaped.retried, sender.sent) == (0, 0, [])
    record = store.get(key)
    assert record is not None
    assert (record.status, record.attempt) == (InvocationStatus.PROJECTING, 1)


def test_the_reaper_still_seals_a_call_that_went_silent_before_its_pass(
    store: RedisCanonicalStore,
) -> None:
    # The re-check leaves only what started since: a call started before is reaped as ever
    key = key_of("silent", "run-reap")
    store.create(key, **create_terms(max_pending_s=0, reap_grace_s=0))
    assert store.claim(key, attempt=1, heartbeat_timeouts={}).record is not None
    time.sleep(0.01)  # the pass comes later than the start (ms clock), not in its millisecond
    reaped = reap_once(store, lambda _: None, retry_after_s=60, max_reprojections=2)
    assert reaped.sealed == 1
    record = store.get(key)
    assert record is not None and record.error_code is ErrorCode.WORKER_LOST


# --- the lease ---------------------------------------------------------------------------------


def test_a_slot_lease_sets_how_long_a_silent_attempt_keeps_its_call(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a tool that heartbeats every second at most, on hosts that pause: a 7 s lease
    key = create_projecting(store, "leased", tool_name="leased")
    record_key, pending_key = keys.record_key(key), keys.pending_key(key.run_id)
    leases: list[float] = []

    def lease_left(since_field: str) -> float:
        since = redis_client.hget(record_key, since_field)
        reap_at = redis_client.zscore(pending_key, key.identity)
        assert since is not None and reap_at is not None
        return reap_at - int(since)

    def run(_: dict[str, Any]) -> dict[str, Any]:
        leases.append(lease_left("started_at"))
        heartbeat(0.5)  # the first beat is written at once
        leases.append(lease_left("heartbeat_at"))
        return {}

    spec = ToolSpec(
        name="leased",
        executor=run,
        projector=EchoProjector(),
        read_only=True,
        heartbeat_timeout_s=1.0,
        slot_lease_s=7.0,
        concurrency=2,
    )
    # When an attempt starts and heartbeats
    assert execute_step(store, ToolRegistry([spec]), key, attempt=1) is ExecuteResult.STORED
    # Then its start and each heartbeat hold the call for the lease, not the heartbeat timeout
    assert leases == [7000, 7000]


def test_a_slot_lease_is_for_tools_that_heartbeat_and_never_shorter() -> None:
    common: dict[str, Any] = {
        "executor": FakeTool(),
        "projector": EchoProjector(),
        "read_only": True,
    }
    with pytest.raises(ValidationError):
        ToolSpec(name="t", slot_lease_s=5.0, **common)
    with pytest.raises(ValidationError):
        ToolSpec(name="t", heartbeat_timeout_s=5.0, slot_lease_s=2.0, **common)
    assert ToolSpec(name="t", heartbeat_timeout_s=2.0, **common).lease_s == 2.0


def test_a_re_send_of_an_unstarted_call_leaves_one_that_started_meanwhile(
    store: RedisCanonicalStore,
) -> None:
    # The flow sweep re-sends a grant whose message failed to send; its tool may start
    # between the sweep's look and its retry: then the running attempt keeps the call
    key = create_projecting(store, "unsent")
    assert store.claim(key, attempt=1, heartbeat_timeouts={}).record is not None
    moved = store.retry_attempt(
        key, attempt=1, reap_after_s=60, reap_grace_s=1, redispatch=True, unstarted=True
    )
    assert moved is WriteStatus.STARTED
    record = store.get(key)
    assert record is not None and record.attempt == 1
    # An attempt that never started is re-sent as before
    other = create_projecting(store, "never-started")
    assert (
        store.retry_attempt(
            other, attempt=1, reap_after_s=60, reap_grace_s=1, redispatch=True, unstarted=True
        )
        == 2
    )
