"""Safe errors on real Redis: whatever a tool, a projector or the store throws, the agent sees a
stable code only; no secret, URL, stack trace, raw payload or Redis key leaks out."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    InProcessDispatcher,
    InvocationStatus,
    Limits,
    Projection,
    RedisCanonicalStore,
    Submission,
    ToolBoundary,
    ToolOutcome,
    ToolRegistry,
)
from boundary.errors import SEAL_CODES
from boundary.store import keys
from tests.conftest import STORE_DB, redis_url
from tests.support.helpers import (
    LEAKS,
    LEAKY_MESSAGE,
    RUN_ID,
    SECRET_TOKEN,
    SECRET_URL,
    STACK_TRACE,
    FakeProjector,
    FakeTool,
    create_projecting,
    envelope,
    key_of,
    make_boundary,
    make_run,
    register,
)


class LeakyError(Exception):
    """An exception whose every text form holds secrets."""

    def __str__(self) -> str:
        return LEAKY_MESSAGE

    def __repr__(self) -> str:
        return f"LeakyError({LEAKY_MESSAGE!r})"


def chained_error() -> Exception:
    """An exception whose cause holds the secrets, as a driver error wrapped by a tool would."""
    try:
        raise ConnectionError(f"cannot reach {SECRET_URL}")
    except ConnectionError as cause:
        try:
            raise RuntimeError(f"lookup failed with {SECRET_TOKEN}") from cause
        except RuntimeError as error:
            return error


TOOL_ERRORS: dict[str, BaseException] = {
    "runtime": RuntimeError(LEAKY_MESSAGE),
    "value": ValueError(SECRET_URL),
    "key": KeyError(SECRET_TOKEN),
    "os": OSError(13, STACK_TRACE, SECRET_URL),
    "custom_str": LeakyError(),
    "chained": chained_error(),
    "driver": redis.ConnectionError(f"Error connecting to {SECRET_URL}"),
    "timeout_builtin": TimeoutError(LEAKY_MESSAGE),
    # Raised in the tool's own thread, these end no process: they are the tool failing.
    "system_exit": SystemExit(LEAKY_MESSAGE),
    "keyboard_interrupt": KeyboardInterrupt(LEAKY_MESSAGE),
}


def assert_nothing_leaks(*texts: str) -> None:
    for text in texts:
        for leak in LEAKS:
            assert leak not in text
        assert "Error(" not in text  # no exception repr either


def texts_of(outcome: ToolOutcome, submission: Submission | None = None) -> list[str]:
    texts = [outcome.model_dump_json(), repr(outcome), outcome.error_message or ""]
    if submission is not None:
        texts += [submission.model_dump_json(), repr(submission)]
    return texts


def record_texts(redis_client: redis.Redis, tool_call_id: str = "call_1") -> list[str]:
    return list(redis_client.hvals(keys.record_key(key_of(tool_call_id))))


@pytest.fixture(autouse=True)
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.mark.parametrize("error", list(TOOL_ERRORS.values()), ids=list(TOOL_ERRORS))
def test_tool_exceptions_never_reach_the_agent(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    redis_client: redis.Redis,
    all_logs: pytest.LogCaptureFixture,
    error: BaseException,
) -> None:
    # Given a tool that raises an exception full of secrets
    _tool, projector = register(registry, FakeTool(error=error))
    # When it is submitted and its outcome read
    submission = boundary.submit(envelope("call_1"), make_run())
    outcome = boundary.outcome(RUN_ID, "call_1", timeout=5)
    # Then the agent gets the stable execution code and nothing else
    assert outcome == ToolOutcome.error("call_1", ErrorCode.TOOL_EXECUTION_FAILED)
    assert outcome.error_message == ErrorCode.TOOL_EXECUTION_FAILED.message
    assert_nothing_leaks(*texts_of(outcome, submission))
    # And neither the record nor the logs kept the exception's text
    assert_nothing_leaks(*record_texts(redis_client), all_logs.text)
    assert projector.calls.value == 0


PROJECTOR_ERRORS = {
    name: error for name, error in TOOL_ERRORS.items() if isinstance(error, Exception)
}


@pytest.mark.parametrize("error", list(PROJECTOR_ERRORS.values()), ids=list(PROJECTOR_ERRORS))
def test_projector_exceptions_never_reach_the_agent(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    redis_client: redis.Redis,
    all_logs: pytest.LogCaptureFixture,
    error: Exception,
) -> None:
    # Given a projector that raises an exception full of secrets
    register(registry, FakeTool({"hits": []}), FakeProjector(error=error))
    # When the call is invoked
    outcome = boundary.invoke(envelope("call_1"), make_run(), timeout=5)
    # Then the agent gets PROJECTION_FAILED and nothing of the exception
    assert outcome == ToolOutcome.error("call_1", ErrorCode.PROJECTION_FAILED)
    assert_nothing_leaks(*texts_of(outcome), *record_texts(redis_client), all_logs.text)


def test_raw_response_with_a_secret_stays_harness_only(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    all_logs: pytest.LogCaptureFixture,
) -> None:
    # Given a tool whose raw response holds a secret, and a projector that keeps a count only
    raw = {"rows": [{"user": "ann", "api_key": SECRET_TOKEN, "dsn": SECRET_URL}]}
    projection = Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"rows": 1})
    register(registry, FakeTool(raw), FakeProjector(projection))
    # When the call is invoked and the run observed
    outcome = boundary.invoke(envelope("call_1"), make_run(), timeout=5)
    facts = boundary.observe(make_run())
    # Then the READY outcome holds only the projection, never the raw response
    assert outcome.status is InvocationStatus.READY
    assert outcome.result == {"rows": 1}
    assert_nothing_leaks(*texts_of(outcome), facts.model_dump_json(), all_logs.text)
    # And the raw response is kept whole in the Harness-only record
    record = store.get(key_of("call_1"))
    assert record is not None
    assert record.raw is not None
    assert SECRET_TOKEN in record.raw


def test_oversized_raw_response_with_a_secret_is_neither_stored_nor_returned(
    redis_client: redis.Redis, registry: ToolRegistry, all_logs: pytest.LogCaptureFixture
) -> None:
    # Given a tool returning a too-large raw response that holds a secret
    boundary, _ = make_boundary(redis_client, registry, limits=Limits(max_raw_bytes=128))
    register(registry, FakeTool({"secret": SECRET_TOKEN, "pad": "x" * 500}))
    # When the call is invoked
    outcome = boundary.invoke(envelope("call_1"), make_run(), timeout=5)
    # Then only the code comes back, and the secret is nowhere in Redis or the logs
    assert outcome.error_code is ErrorCode.RESULT_TOO_LARGE
    assert_nothing_leaks(*texts_of(outcome), *record_texts(redis_client), all_logs.text)


def test_unserializable_raw_response_leaks_nothing(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    redis_client: redis.Redis,
    all_logs: pytest.LogCaptureFixture,
) -> None:
    # Given a tool returning an object whose repr holds secrets
    register(registry, FakeTool({"obj": LeakyError()}))
    # When the call is invoked
    outcome = boundary.invoke(envelope("call_1"), make_run(), timeout=5)
    # Then the agent gets SERIALIZATION_FAILED only
    assert outcome == ToolOutcome.error("call_1", ErrorCode.SERIALIZATION_FAILED)
    assert_nothing_leaks(*texts_of(outcome), *record_texts(redis_client), all_logs.text)


def test_store_failing_during_a_call_returns_a_safe_code(
    registry: ToolRegistry, redis_client: redis.Redis, all_logs: pytest.LogCaptureFixture
) -> None:
    # Given a store made from a URL, and a tool during which its Redis becomes unreachable
    store = RedisCanonicalStore.from_url(redis_url(STORE_DB), ttl_s=600)
    client = store.client

    def cut_the_store(arguments: dict[str, Any]) -> None:
        # New connections go to a port nothing listens on, with a password.
        client.connection_pool.connection_kwargs.update(port=1, password="hunter2")
        client.connection_pool.reset()

    register(registry, FakeTool(during=cut_the_store))
    boundary = ToolBoundary(
        store=store,
        registry=registry,
        dispatcher=InProcessDispatcher(store, registry, inline=True),
    )
    # When a call is submitted (under a run and call id of its own: every other test uses
    # run-1/call_1, and a late Celery message of an earlier test, for run-1/call_1, taken by
    # the session's worker thread in this process, would find this record and seal it; the
    # session's worker's client was never cut)
    run_id, call_id = "run-store-cut", "call_store_cut"
    submission = boundary.submit(envelope(call_id, run_id=run_id), make_run(run_id))
    # Then the agent gets a bounded code, and nothing of the driver's error text
    assert submission.outcome is not None
    assert submission.outcome.error_code in {ErrorCode.DISPATCH_FAILED, ErrorCode.STORE_UNAVAILABLE}
    assert submission.outcome.result is None
    assert_nothing_leaks(*texts_of(submission.outcome, submission), all_logs.text)
    assert "127.0.0.1:1" not in all_logs.text
    # And the store really failed: the record could not even be sealed (the reaper's job)
    assert redis_client.hget(keys.record_key(key_of(call_id, run_id)), "status") == "PROJECTING"
    client.close()


def test_every_seal_error_code_reads_back_as_a_safe_outcome(
    boundary: ToolBoundary,
    store: RedisCanonicalStore,
) -> None:
    # Given a record sealed ERROR with each code a record may carry
    for index, code in enumerate(sorted(SEAL_CODES)):
        key = create_projecting(store, f"call_{index}")
        store.seal_error(key, code)
        # When its outcome is read
        outcome = boundary.outcome(RUN_ID, f"call_{index}")
        # Then it is that code with its fixed sentence, and nothing else
        assert outcome == ToolOutcome.error(f"call_{index}", code)
        assert outcome.error_message == code.message
        assert_nothing_leaks(*texts_of(outcome))
