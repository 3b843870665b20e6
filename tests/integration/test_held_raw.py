"""A call projected in line keeps its raw response with its seal: the execute step holds the
response it checked (``hold_raw=True``) and ``project_held`` writes it in the seal's script,
fenced by the attempt. Every refusal ends as the write of the response alone would have."""

from __future__ import annotations

from typing import Any

import redis

from boundary import (
    InvocationStatus,
    Projection,
    RedisCanonicalStore,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
)
from boundary.errors import ErrorCode
from boundary.steps import ExecuteResult, HeldRaw, execute_step, keep_held, project_held
from boundary.store import WriteStatus, keys
from tests.support.helpers import (
    EchoProjector,
    FakeTool,
    create_projecting,
    load_scripts,
    monitored,
)

RESPONSE = {"hits": [{"id": 7}]}


class Broken:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        raise RuntimeError("secret-token in the projector's message")


def registry_of(tool: Any, projector: Any = None) -> ToolRegistry:
    spec = ToolSpec(
        name="search", executor=tool, projector=projector or EchoProjector(), read_only=True
    )
    return ToolRegistry([spec])


def held_call(store: RedisCanonicalStore, name: str, projector: Any = None) -> HeldRaw:
    """A call whose attempt 1 ran its tool and held the response."""
    key = create_projecting(store, name, tool_name="search")
    held = execute_step(
        store, registry_of(FakeTool(RESPONSE), projector), key, attempt=1, hold_raw=True
    )
    assert isinstance(held, HeldRaw)
    return held


def test_a_held_response_is_not_written_until_its_seal_keeps_it_in_one_script(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given an attempt that ran its tool and held the response
    held = held_call(store, "held")
    record = store.get(held.record.key)
    assert record is not None and (record.status, record.raw) == (InvocationStatus.PROJECTING, None)

    # When the project step runs in line
    load_scripts(store)
    with monitored(redis_client, round_trips=True) as commands:
        outcome = project_held(store, registry_of(FakeTool(RESPONSE)), held)

    # Then one script sealed the call READY and kept the complete response with it
    assert isinstance(outcome, ToolOutcome)
    assert (outcome.status, outcome.result) == (InvocationStatus.READY, RESPONSE)
    # (a connection's set-up aside)
    sent = [c.split()[0] for c in commands if c.split()[0] not in ("select", "client", "hello")]
    assert sent == ["evalsha"], commands
    sealed = store.get(held.record.key)
    assert sealed is not None
    assert sealed.status is InvocationStatus.READY
    assert sealed.raw == '{"hits":[{"id":7}]}'
    assert sealed.agent_result == sealed.raw


def test_a_projector_that_fails_seals_error_and_the_response_is_still_kept(
    store: RedisCanonicalStore,
) -> None:
    held = held_call(store, "broken", Broken())
    outcome = project_held(store, registry_of(FakeTool(RESPONSE), Broken()), held)
    assert isinstance(outcome, ToolOutcome)
    assert outcome.error_code is ErrorCode.PROJECTION_FAILED
    sealed = store.get(held.record.key)
    assert sealed is not None
    assert (sealed.status, sealed.error_code) == (
        InvocationStatus.ERROR,
        ErrorCode.PROJECTION_FAILED,
    )
    # Kept for a later re-projection; nothing of the exception's text in the record
    assert sealed.raw == '{"hits":[{"id":7}]}'
    assert "secret-token" not in sealed.model_dump_json()


def test_a_held_response_of_an_attempt_taken_over_is_dropped_and_counted(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a held response whose call was then handed to attempt 2
    held = held_call(store, "stale")
    key = held.record.key
    moved = store.retry_attempt(key, attempt=1, reap_after_s=3600, reap_grace_s=60)
    assert moved == 2

    # When its project step runs
    ended = project_held(store, registry_of(FakeTool(RESPONSE)), held)

    # Then nothing is written: the call waits for attempt 2, the refusal counted once
    assert ended is ExecuteResult.HANDED_ON
    record = store.get(key)
    assert record is not None
    assert (record.status, record.raw, record.attempt) == (InvocationStatus.PROJECTING, None, 2)
    assert int(redis_client.hget(keys.record_key(key), "stale_refusals") or 0) == 1


def test_a_call_sealed_meanwhile_keeps_its_seal_and_no_response(
    store: RedisCanonicalStore,
) -> None:
    held = held_call(store, "cancelled")
    key = held.record.key
    assert store.seal_error(key, ErrorCode.CANCELLED) is WriteStatus.OK
    assert project_held(store, registry_of(FakeTool(RESPONSE)), held) is ExecuteResult.SEALED
    record = store.get(key)
    assert record is not None
    assert (record.error_code, record.raw) == (ErrorCode.CANCELLED, None)


def test_a_call_gone_meanwhile_is_missing(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    held = held_call(store, "gone")
    redis_client.delete(keys.record_key(held.record.key))
    assert project_held(store, registry_of(FakeTool(RESPONSE)), held) is ExecuteResult.MISSING
    assert store.get(held.record.key) is None


def test_a_response_kept_already_is_the_one_projected(store: RedisCanonicalStore) -> None:
    # Given a held response, and a response the record holds already
    held = held_call(store, "kept")
    key = held.record.key
    assert store.store_raw(key, '{"hits":["kept"]}', attempt=1) is WriteStatus.OK
    # When the held one's project step runs, the record decides: the kept one is projected
    outcome = project_held(store, registry_of(FakeTool(RESPONSE)), held)
    assert isinstance(outcome, ToolOutcome)
    assert outcome.result == {"hits": ["kept"]}
    record = store.get(key)
    assert record is not None and record.raw == '{"hits":["kept"]}'


def test_keep_held_writes_the_response_alone_as_the_execute_step_would(
    store: RedisCanonicalStore,
) -> None:
    held = held_call(store, "alone")
    assert keep_held(store, held) is ExecuteResult.STORED
    record = store.get(held.record.key)
    assert record is not None
    assert (record.status, record.raw) == (InvocationStatus.PROJECTING, '{"hits":[{"id":7}]}')
    # Written once: a second keep changes nothing and says so
    assert keep_held(store, held) is ExecuteResult.STORED


def test_without_hold_raw_the_execute_step_writes_the_response(
    store: RedisCanonicalStore,
) -> None:
    key = create_projecting(store, "unheld", tool_name="search")
    assert execute_step(store, registry_of(FakeTool(RESPONSE)), key) is ExecuteResult.STORED
    record = store.get(key)
    assert record is not None and record.raw == '{"hits":[{"id":7}]}'
