"""The async boundary (``asubmit``, ``ainvoke``, ``aoutcome``, ``aobserve``) on real Redis,
with the in-process dispatcher running calls on background threads; the outcome's new
properties and its text for a model."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolOutcome,
    ToolRegistry,
)
from boundary.errors import RETRYABLE_CODES
from boundary.models import PENDING_TEXT
from boundary.store import keys
from boundary.store.aio import NOTIFY_CLIENT_NAME
from tests.support.helpers import (
    RUN_ID,
    FakeTool,
    create_projecting,
    envelope,
    is_running,
    key_of,
    make_run,
    monitored,
    register,
)

T = TypeVar("T")


def run_async(boundary: ToolBoundary, body: Callable[[], Awaitable[T]]) -> T:
    """Runs ``body`` on a fresh event loop and closes the boundary's async connections."""

    async def main() -> T:
        try:
            return await body()
        finally:
            await boundary.aclose()

    return asyncio.run(main())


@pytest.fixture
def background(store: RedisCanonicalStore, registry: ToolRegistry) -> ToolBoundary:
    """A boundary whose in-process dispatcher runs each call on a background thread."""
    return ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )


def test_ainvoke_returns_the_same_outcome_as_invoke(
    background: ToolBoundary, registry: ToolRegistry
) -> None:
    # Given a tool
    register(registry)
    # When one call goes through ainvoke and another through invoke
    got = run_async(background, lambda: background.ainvoke(envelope("a"), make_run(), timeout=5))
    sync = background.invoke(envelope("b"), make_run(), timeout=5)
    # Then both are READY with the same bounded result
    assert got.status is InvocationStatus.READY
    assert got.model_dump(exclude={"tool_call_id"}) == sync.model_dump(exclude={"tool_call_id"})
    assert got.tool_call_id == "a"
    assert not got.is_error and not got.pending


def test_asubmit_then_aoutcome_reads_the_sealed_record(
    background: ToolBoundary, registry: ToolRegistry
) -> None:
    register(registry)

    async def body() -> tuple[Any, ToolOutcome]:
        submission = await background.asubmit(envelope("call_1"), make_run())
        return submission, await background.aoutcome(RUN_ID, "call_1", timeout=5)

    submission, outcome = run_async(background, body)
    assert submission.accepted and submission.key == key_of("call_1")
    assert outcome.status is InvocationStatus.READY
    assert outcome.evidence_status is EvidenceStatus.EVIDENCE_FOUND


def test_async_rejections_and_unknown_calls_answer_at_once(
    background: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    register(registry)

    async def body() -> list[ToolOutcome]:
        rejected = await background.ainvoke(envelope("x", run_id="run-2"), make_run(), timeout=5)
        unknown = await background.aoutcome(RUN_ID, "never-made", timeout=5)
        unsafe = await background.aoutcome(RUN_ID, "bad id{", timeout=5)
        return [rejected, unknown, unsafe]

    rejected, unknown, unsafe = run_async(background, body)
    assert rejected == ToolOutcome.error("x", ErrorCode.RUN_ID_MISMATCH)
    assert unknown == ToolOutcome.error("never-made", ErrorCode.RECORD_NOT_FOUND)
    assert unsafe == ToolOutcome.error(None, ErrorCode.RECORD_NOT_FOUND)
    assert all(o.is_error for o in (rejected, unknown, unsafe))
    assert not redis_client.exists(keys.record_key(key_of("x", "run-2")))


def test_a_wait_that_runs_out_is_pending_and_a_later_aoutcome_is_ready(
    background: ToolBoundary, registry: ToolRegistry
) -> None:
    # Given a tool that runs until released
    release = threading.Event()
    register(registry, FakeTool(during=lambda arguments: release.wait(10)))

    async def body() -> tuple[ToolOutcome, ToolOutcome]:
        # When ainvoke's timeout runs out while it still runs
        pending = await background.ainvoke(envelope("call_1"), make_run(), timeout=0.2)
        release.set()
        # And the same ids are asked for again
        return pending, await background.aoutcome(RUN_ID, "call_1", timeout=10)

    pending, later = run_async(background, body)
    # Then the first answer is the call's real state, not an exception
    assert is_running(pending, "call_1"), pending
    assert pending.pending and not pending.is_error
    assert (pending.error_code, pending.result, pending.evidence_status) == (None, None, None)
    # And the later one is READY for the same ids
    assert later.status is InvocationStatus.READY
    assert later.tool_call_id == "call_1"


def test_sync_outcome_and_invoke_return_pending_instead_of_raising(
    background: ToolBoundary, registry: ToolRegistry
) -> None:
    release = threading.Event()
    register(registry, FakeTool(during=lambda arguments: release.wait(10)))
    try:
        assert background.invoke(envelope("call_1"), make_run(), timeout=0.1).pending
        assert background.outcome(RUN_ID, "call_1", timeout=0.1).pending
    finally:
        release.set()
    assert background.outcome(RUN_ID, "call_1", timeout=10).status is InvocationStatus.READY


def test_aobserve_gives_the_same_facts_as_observe(
    background: ToolBoundary, registry: ToolRegistry
) -> None:
    register(registry)
    run = make_run()
    for call_id in ("c1", "c2"):
        assert background.invoke(envelope(call_id), run, timeout=5).status == "READY"
    facts = run_async(background, lambda: background.aobserve(run))
    assert facts == background.observe(run)
    assert [f.tool_call_id for f in facts.facts] == ["c1", "c2"]


def test_aobserve_reads_a_runs_records_in_one_command(
    background: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a run of twelve READY calls
    register(registry)
    run = make_run()
    for n in range(12):
        assert background.invoke(envelope(f"c{n:02d}"), run, timeout=5).status == "READY"
    expected = background.observe(run)  # the server holds the script from here on

    # When it is observed on an event loop
    with monitored(redis_client, round_trips=True) as commands:
        facts = run_async(background, lambda: background.aobserve(run))

    # Then the records were read by one script (read_records.lua), not one HMGET each
    names = [command.split(" ", 1)[0] for command in commands]
    assert (names.count("zrange"), names.count("evalsha"), names.count("hmget")) == (2, 1, 0)
    assert facts == expected
    assert len(facts.facts) == 12


def test_aobserve_reads_again_after_the_server_lost_its_scripts(
    background: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    register(registry)
    run = make_run()
    assert background.invoke(envelope("c1"), run, timeout=5).status == "READY"
    redis_client.script_flush()

    facts = run_async(background, lambda: background.aobserve(run))

    assert [f.tool_call_id for f in facts.facts] == ["c1"]


def test_async_calls_on_an_unreachable_store_return_store_unavailable(
    registry: ToolRegistry,
) -> None:
    store = RedisCanonicalStore.from_url("redis://:hunter2@127.0.0.1:1/0")
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    register(registry)

    async def body() -> list[ToolOutcome | None]:
        submitted = await boundary.asubmit(envelope("call_1"), make_run())
        waited = await boundary.aoutcome(RUN_ID, "call_1", timeout=1)
        return [submitted.outcome, waited]

    for outcome in run_async(boundary, body):
        assert outcome is not None
        assert outcome.error_code is ErrorCode.STORE_UNAVAILABLE
        assert "hunter2" not in outcome.model_dump_json()


def test_a_loop_ended_without_aclose_is_left_with_nothing_of_ours(
    background: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a loop that an SDK runs and closes as soon as its coroutine returns
    register(registry)
    loop = asyncio.new_event_loop()
    try:
        # When an async call runs on it, with no aclose
        outcome = loop.run_until_complete(
            background.ainvoke(envelope("call_1"), make_run(), timeout=5)
        )
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
    finally:
        loop.close()
    # Then the call is READY, no task of ours is left pending, no Pub/Sub connection open
    assert outcome.status is InvocationStatus.READY
    assert left == []
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
    clients = redis_client.client_list()
    assert [c for c in clients if c.get("name") == NOTIFY_CLIENT_NAME and c["db"] == db] == []


# --- the outcome's properties and its one text for a model ------------------------------


def test_retryable_codes_are_the_infrastructure_and_time_failures() -> None:
    assert {code for code in ErrorCode if code.retryable} == RETRYABLE_CODES
    assert {
        ErrorCode.STORE_UNAVAILABLE,
        ErrorCode.DISPATCH_FAILED,
        ErrorCode.TOOL_TIMEOUT,
        ErrorCode.WORKER_LOST,
        ErrorCode.TOOL_BUSY,
    } == RETRYABLE_CODES
    assert not ErrorCode.DUPLICATE_TOOL_CALL.retryable


def test_outcome_text_for_a_model_is_stable_and_holds_nothing_else() -> None:
    ready = ToolOutcome(
        tool_call_id="c1",
        status=InvocationStatus.READY,
        evidence_status=EvidenceStatus.EVIDENCE_FOUND,
        result={"b": 1, "a": "é"},
        scope={"query": "q"},
    )
    assert ready.as_text() == (
        '{"evidence_status":"EVIDENCE_FOUND","result":{"a":"é","b":1},'
        '"scope":{"query":"q"},"status":"READY"}'
    )
    error = ToolOutcome.error("c1", ErrorCode.TOOL_TIMEOUT)
    assert json.loads(error.as_text()) == {
        "status": "ERROR",
        "error_code": "TOOL_TIMEOUT",
        "message": ErrorCode.TOOL_TIMEOUT.message,
    }
    pending = ToolOutcome.running("c1")
    assert pending.as_text() == PENDING_TEXT
    assert json.loads(PENDING_TEXT) == {
        "status": "PROJECTING",
        "message": "The call is still running; ask again for this tool_call_id.",
    }
    # the same outcome, the same text (also after a JSON round trip)
    for outcome in (ready, error, pending):
        again = ToolOutcome.model_validate_json(outcome.model_dump_json())
        assert again == outcome
        assert again.as_text() == outcome.as_text()


def test_an_async_waiter_woken_by_the_seal_message_does_not_read_the_record_again(
    background: ToolBoundary, store: RedisCanonicalStore
) -> None:
    # Given a PROJECTING call (written straight through the store: nothing runs it)
    key = create_projecting(store, "c1")
    seen: list[str] = []  # the status each async read of the record saw

    async def body() -> ToolOutcome:
        astore = background._aio.store()  # the loop's async store, as aoutcome uses it
        assert astore is not None
        read = astore.get

        async def counted(k: Any, **kw: Any) -> Any:
            got = await read(k, **kw)
            seen.append(got.status.value if got is not None else "MISSING")
            return got

        astore.get = counted  # type: ignore[method-assign]
        # When it is sealed from another thread while waited on
        threading.Timer(0.2, store.seal_error, args=(key, ErrorCode.TOOL_TIMEOUT)).start()
        return await background.aoutcome(key.run_id, key.tool_call_id, timeout=30)

    outcome = run_async(background, body)
    # Then the outcome is the seal's, from its message: one read, before the seal
    assert outcome.error_code is ErrorCode.TOOL_TIMEOUT and outcome.tool_call_id == "c1"
    assert seen == ["PROJECTING"]
