"""Runs kept in Redis (open_run / get_run / close_run) and cancel, on real Redis with the
in-process dispatcher: the cancel seal is atomic and final."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolOutcome,
    ToolRegistry,
)
from boundary.store import OpenRunStatus, WriteStatus, keys
from tests.support.helpers import RUN_ID, create_projecting, envelope, key_of, make_run, register


def test_an_opened_run_reads_back_equal_with_the_record_ttl(
    boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    # Given a run with a policy: tools, budgets and a deadline
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    run = make_run(
        tools=("search", "logs"),
        max_tool_calls=4,
        max_calls_per_tool={"search": 2},
        deadline=deadline,
    )
    # When it is opened and read back by id
    status = boundary.open_run(run)
    read = boundary.get_run(RUN_ID)
    # Then it is the same policy, kept under the run key with the record TTL
    assert status is OpenRunStatus.OPENED and status.is_open
    assert read == run
    ttl_ms = redis_client.pttl(keys.run_key(RUN_ID))
    assert 590_000 < ttl_ms <= 600_000


def test_reading_a_run_never_touches_its_ttl(
    boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    # Given an opened run whose TTL was shortened
    boundary.open_run(make_run())
    redis_client.pexpire(keys.run_key(RUN_ID), 50_000)
    # When it is read many times
    for _ in range(5):
        assert boundary.get_run(RUN_ID) is not None
    # Then the TTL only went down
    assert redis_client.pttl(keys.run_key(RUN_ID)) <= 50_000


def test_an_open_run_keeps_its_policy_and_a_closed_run_never_reopens(
    boundary: ToolBoundary,
) -> None:
    # Given an open run
    run = make_run(max_tool_calls=1)
    assert boundary.open_run(run) is OpenRunStatus.OPENED
    # When it is opened again with the same policy, then with a wider one
    again = boundary.open_run(run)
    wider = boundary.open_run(make_run(max_tool_calls=100))
    # Then the same policy is a no-op, the wider one is refused and the first one stays
    assert again is OpenRunStatus.ALREADY_OPEN
    assert wider is OpenRunStatus.CONFLICT and not wider.is_open
    assert boundary.get_run(RUN_ID) == run
    # When the run is closed
    assert boundary.close_run(RUN_ID) is True
    # Then it is gone for lookups, cannot be closed twice, and never reopens
    assert boundary.get_run(RUN_ID) is None
    assert boundary.close_run(RUN_ID) is False
    assert boundary.open_run(run) is OpenRunStatus.CLOSED
    assert boundary.get_run(RUN_ID) is None


def test_closing_keeps_the_remaining_ttl_and_never_recreates_an_expired_run(
    boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    # Given an opened run with a short remaining TTL
    boundary.open_run(make_run())
    redis_client.pexpire(keys.run_key(RUN_ID), 40_000)
    # When it is closed
    boundary.close_run(RUN_ID)
    # Then the TTL was kept, not renewed
    assert 0 < redis_client.pttl(keys.run_key(RUN_ID)) <= 40_000
    # And closing a run that is gone writes nothing
    assert boundary.close_run("run-gone") is False
    assert not redis_client.exists(keys.run_key("run-gone"))


def test_unknown_and_unsafe_run_ids_are_not_found(boundary: ToolBoundary) -> None:
    # Given nothing opened
    # When runs are looked up by unknown or unsafe ids
    # Then none is found and nothing raises
    assert boundary.get_run("run-never") is None
    assert boundary.get_run("tb:{x}") is None
    assert boundary.get_run("") is None
    assert boundary.close_run("a b") is False


def test_new_codes_have_fixed_sentences() -> None:
    # Given the codes of cancellation and run lookups
    # Then each has its fixed sentence
    assert ErrorCode.CANCELLED.message == "The call was cancelled before it finished."
    assert ErrorCode.RUN_NOT_FOUND.message.startswith("No open run has this id")


def test_cancel_seals_a_projecting_call_and_a_later_seal_changes_nothing(
    boundary: ToolBoundary, store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a call still PROJECTING
    key = create_projecting(store, "call_1")
    # When it is cancelled
    outcome = boundary.cancel(RUN_ID, "call_1")
    # Then it is sealed ERROR CANCELLED, indexed in the run's progress like any seal
    assert outcome == ToolOutcome.error("call_1", ErrorCode.CANCELLED)
    record = store.get(key)
    assert record is not None
    assert record.status is InvocationStatus.ERROR
    assert record.evidence_status is EvidenceStatus.ERROR
    assert record.error_code is ErrorCode.CANCELLED
    assert redis_client.zcard(keys.progress_key(RUN_ID)) == 1
    # When the tool returns afterwards: its raw response and its seal are both refused
    assert store.store_raw(key, '{"late":true}') is WriteStatus.NOT_PROJECTING
    late = store.seal(key, evidence_status=EvidenceStatus.EVIDENCE_FOUND, agent_result="{}")
    assert late is WriteStatus.NOT_PROJECTING
    # Then the record still says CANCELLED, with no raw response
    after = store.get(key)
    assert after is not None and after.error_code is ErrorCode.CANCELLED and after.raw is None
    assert boundary.outcome(RUN_ID, "call_1") == outcome


def test_cancel_of_a_finished_call_returns_its_outcome_unchanged(
    boundary: ToolBoundary, registry: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Given a call that finished READY
    register(registry)
    run = make_run()

    done = boundary.invoke(envelope("call_1"), run, timeout=5)
    assert done.status is InvocationStatus.READY
    # When it is cancelled
    outcome = boundary.cancel(RUN_ID, "call_1")
    # Then the outcome is the READY one and the record did not change
    assert outcome == done
    record = store.get(key_of("call_1"))
    assert record is not None and record.status is InvocationStatus.READY


def test_cancel_of_an_unknown_call_is_record_not_found(boundary: ToolBoundary) -> None:
    # Given no such call, or ids that are not safe
    # When they are cancelled
    # Then each is RECORD_NOT_FOUND and nothing is written
    assert boundary.cancel(RUN_ID, "call_x").error_code is ErrorCode.RECORD_NOT_FOUND
    assert boundary.cancel("tb:{x}", "call_x").error_code is ErrorCode.RECORD_NOT_FOUND


def test_closing_a_run_cancels_its_projecting_calls_and_leaves_the_rest(
    boundary: ToolBoundary, registry: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Given an open run with a finished call, two calls still PROJECTING, and another run's
    register(registry)
    run = make_run()
    boundary.open_run(run)
    finished = boundary.invoke(envelope("call_done"), run, timeout=5)
    running = [create_projecting(store, f"call_{i}") for i in range(2)]
    elsewhere = create_projecting(store, "call_x", run_id="run-2")
    # When the run is closed
    assert boundary.close_run(RUN_ID) is True
    # Then its PROJECTING calls are sealed CANCELLED, the finished one and the other run's
    # call are untouched
    for key in running:
        assert boundary.outcome(RUN_ID, key.tool_call_id) == ToolOutcome.error(
            key.tool_call_id, ErrorCode.CANCELLED
        )
    assert boundary.outcome(RUN_ID, "call_done") == finished
    assert finished.status is InvocationStatus.READY
    other = store.get(elsewhere)
    assert other is not None and other.status is InvocationStatus.PROJECTING


def test_closing_again_finishes_an_interrupted_close(
    boundary: ToolBoundary, store: RedisCanonicalStore
) -> None:
    # Given a run closed by a server that died before it cancelled the run's calls
    boundary.open_run(make_run())
    assert store.close_run(RUN_ID) is True
    key = create_projecting(store)
    # When it is closed again
    assert boundary.close_run(RUN_ID) is False
    # Then the call left PROJECTING is cancelled now
    assert boundary.outcome(RUN_ID, key.tool_call_id).error_code is ErrorCode.CANCELLED
