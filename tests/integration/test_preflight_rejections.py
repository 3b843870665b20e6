"""Every preflight rejection through ``ToolBoundary.submit`` on real Redis: the stable code,
no record written, the tool never run. Arguments are sent as JSON text, bytes and a dict."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    Limits,
    RunContext,
    Submission,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
)
from boundary.store import keys
from tests.support.helpers import (
    RUN_ID,
    TOOL,
    FakeProjector,
    FakeTool,
    db_keys,
    envelope,
    key_of,
    make_boundary,
    make_run,
    record_keys,
    register,
    snapshot,
)

#: A marker inside the arguments: a refused call must never echo its request.
NEEDLE = "needle-in-the-request"
VALID = {"query": NEEDLE, "limit": 3}

FORMS = ["text", "bytes", "dict"]
#: Stands for "the valid default arguments" (``None`` is a value under test).
DEFAULT = object()


def as_form(value: Any, form: str) -> Any:
    """``value`` (a dict, or JSON text for values a dict cannot hold) in the given form."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if form == "text":
        return text
    if form == "bytes":
        return text.encode("utf-8")
    return json.loads(text) if isinstance(value, str) else value


def assert_refused(
    submission: Submission,
    code: ErrorCode,
    redis_client: redis.Redis,
    tool: FakeTool,
    projector: FakeProjector,
    keys_before: set[str],
) -> None:
    # The agent gets the stable code and nothing else
    assert submission.accepted is False
    outcome = submission.outcome
    assert outcome is not None
    assert outcome.status is InvocationStatus.ERROR
    assert outcome.evidence_status is EvidenceStatus.ERROR
    assert outcome.error_code is code
    assert outcome.result is None
    assert outcome.scope is None
    assert NEEDLE not in submission.model_dump_json()
    # No record (nor any other key) was written, and nothing ran
    assert db_keys(redis_client) == keys_before
    assert tool.calls.value == 0
    assert projector.calls.value == 0


@contextmanager
def unchanged(redis_client: redis.Redis) -> Iterator[None]:
    """Asserts that the block leaves every key of the test DB, and the run's budget, as
    they were."""
    before = db_keys(redis_client)
    budget = redis_client.hgetall(keys.budget_key(RUN_ID))
    yield
    assert db_keys(redis_client) == before
    assert redis_client.hgetall(keys.budget_key(RUN_ID)) == budget


def refused_code(submission: Submission) -> ErrorCode | None:
    """The error code of a submission's outcome (which a refusal always has)."""
    assert submission.outcome is not None
    return submission.outcome.error_code


@pytest.fixture
def fakes(registry: ToolRegistry) -> tuple[FakeTool, FakeProjector]:
    tool, projector = register(registry)
    return tool, projector


def submit(
    boundary: ToolBoundary,
    tool_call_id: str | None = "call_1",
    arguments: Any = DEFAULT,
    *,
    run: RunContext | None = None,
    **fields: Any,
) -> Submission:
    call = envelope(
        tool_call_id, json.dumps(VALID) if arguments is DEFAULT else arguments, **fields
    )
    return boundary.submit(call, run or make_run())


@pytest.mark.parametrize(
    "tool_call_id",
    [None, "", " a", "a b", "a:b", "{a}", "a\n", "a" * 129, "café", "ａ"],
)
def test_blank_or_unsafe_tool_call_id_is_rejected(
    boundary: ToolBoundary,
    redis_client: redis.Redis,
    fakes: tuple[FakeTool, FakeProjector],
    tool_call_id: str | None,
) -> None:
    # Given an envelope whose framework id is missing or unsafe
    # When it is submitted
    submission = submit(boundary, tool_call_id)
    # Then it is refused before anything is stored or run, and no fallback id is made up
    assert_refused(submission, ErrorCode.INVALID_TOOL_CALL_ID, redis_client, *fakes, set())
    assert submission.key is None
    assert submission.outcome is not None
    assert submission.outcome.tool_call_id is None


@pytest.mark.parametrize("form", FORMS)
def test_cross_run_envelope_is_rejected_in_every_argument_form(
    boundary: ToolBoundary,
    redis_client: redis.Redis,
    fakes: tuple[FakeTool, FakeProjector],
    form: str,
) -> None:
    # Given an envelope naming another run
    # When it is submitted
    submission = submit(boundary, arguments=as_form(VALID, form), run_id="run-2")
    # Then it is refused
    assert_refused(submission, ErrorCode.RUN_ID_MISMATCH, redis_client, *fakes, set())


INVALID_ARGUMENTS: list[tuple[str, Any]] = [
    ("list", [1, 2]),
    ("string", "just text"),
    ("number", 42),
    ("null", None),
    ("nan", '{"query": NaN}'),
    ("infinity", '{"query": Infinity}'),
    ("duplicate_keys", '{"query": "a", "query": "b"}'),
    ("lone_surrogate", '{"query": "\\udc00"}'),
]


@pytest.mark.parametrize(
    ("case", "value", "form"),
    [
        pytest.param(case, value, form, id=f"{case}-{form}")
        for case, value in INVALID_ARGUMENTS
        for form in FORMS
        # A dict cannot hold a key twice.
        if (case, form) != ("duplicate_keys", "dict")
    ],
)
def test_arguments_that_are_not_a_strict_json_object_are_rejected(
    boundary: ToolBoundary,
    redis_client: redis.Redis,
    fakes: tuple[FakeTool, FakeProjector],
    case: str,
    value: Any,
    form: str,
) -> None:
    # Given arguments that are not a strict JSON object, as text, bytes or a Python value
    if form == "dict":
        python_forms: dict[str, Any] = {
            "nan": {"query": float("nan")},
            "infinity": {"query": float("-inf")},
            "lone_surrogate": {"query": "\udc00"},
        }
        arguments = python_forms.get(case, value)
    else:
        text = value if isinstance(value, str) and case != "string" else json.dumps(value)
        arguments = text if form == "text" else text.encode("utf-8", "surrogatepass")
    # When they are submitted
    submission = submit(boundary, arguments=arguments)
    # Then they are refused as invalid arguments
    assert_refused(submission, ErrorCode.INVALID_ARGUMENTS, redis_client, *fakes, set())


def test_invalid_utf8_bytes_are_rejected(
    boundary: ToolBoundary, redis_client: redis.Redis, fakes: tuple[FakeTool, FakeProjector]
) -> None:
    # Given argument bytes that are not UTF-8
    # When they are submitted
    submission = submit(boundary, arguments=b'{"query": "\xff\xfe"}')
    # Then they are refused
    assert_refused(submission, ErrorCode.INVALID_ARGUMENTS, redis_client, *fakes, set())


@pytest.mark.parametrize("form", FORMS)
def test_nesting_deeper_than_the_limit_is_rejected(
    boundary: ToolBoundary,
    redis_client: redis.Redis,
    fakes: tuple[FakeTool, FakeProjector],
    form: str,
) -> None:
    # Given arguments nested one level deeper than Limits.max_json_depth
    inner: Any = NEEDLE
    for _ in range(Limits().max_json_depth + 1):
        inner = {"k": inner}
    # When they are submitted
    submission = submit(boundary, arguments=as_form(inner, form))
    # Then they are refused
    assert_refused(submission, ErrorCode.INVALID_ARGUMENTS, redis_client, *fakes, set())


@pytest.mark.parametrize("form", FORMS)
def test_request_too_large_is_rejected(
    redis_client: redis.Redis,
    registry: ToolRegistry,
    fakes: tuple[FakeTool, FakeProjector],
    form: str,
) -> None:
    # Given a 64-byte request limit and 65 bytes of canonical arguments (27 characters)
    small, _ = make_boundary(redis_client, registry, limits=Limits(max_request_bytes=64))
    arguments = {"q": "€" * 19}
    # When they are submitted
    submission = submit(small, arguments=as_form(arguments, form))
    # Then they are refused as too large
    assert_refused(submission, ErrorCode.REQUEST_TOO_LARGE, redis_client, *fakes, set())


@pytest.mark.parametrize(
    ("case", "run_fields", "tool_name", "code"),
    [
        ("unknown_tool", {}, "nope", ErrorCode.UNKNOWN_TOOL),
        ("unauthorized", {"tools": ()}, TOOL, ErrorCode.UNAUTHORIZED),
        ("not_read_only", {"tools": ("write",)}, "write", ErrorCode.NOT_READ_ONLY),
        ("run_inactive", {"active": False}, TOOL, ErrorCode.RUN_INACTIVE),
        (
            "run_deadline_exceeded",
            {"deadline": datetime.now(UTC) - timedelta(seconds=1)},
            TOOL,
            ErrorCode.RUN_DEADLINE_EXCEEDED,
        ),
    ],
)
@pytest.mark.parametrize("form", FORMS)
def test_tool_and_run_checks_reject_before_anything_is_stored(
    boundary: ToolBoundary,
    redis_client: redis.Redis,
    registry: ToolRegistry,
    fakes: tuple[FakeTool, FakeProjector],
    case: str,
    run_fields: dict[str, Any],
    tool_name: str,
    code: ErrorCode,
    form: str,
) -> None:
    # Given a registry with a read-only tool and a writable one, and a run that forbids the call
    writer, writer_projector = register(registry, name="write", read_only=False)
    # When the call is submitted
    submission = submit(
        boundary, arguments=as_form(VALID, form), run=make_run(**run_fields), tool_name=tool_name
    )
    # Then it is refused with the stable code, nothing is stored, and no tool ran
    assert_refused(submission, code, redis_client, *fakes, set())
    assert writer.calls.value == 0
    assert writer_projector.calls.value == 0


@pytest.mark.parametrize("form", FORMS)
def test_duplicate_tool_call_is_rejected(
    boundary: ToolBoundary,
    redis_client: redis.Redis,
    fakes: tuple[FakeTool, FakeProjector],
    form: str,
) -> None:
    # Given a call that already completed
    tool, projector = fakes
    assert submit(boundary).accepted
    record = snapshot(redis_client, keys.record_key(key_of("call_1")))
    # When a second call with the same id is submitted (other arguments, same run)
    with unchanged(redis_client):
        submission = submit(boundary, arguments=as_form({"query": "other"}, form))
    # Then it is refused, the tool does not run again, and nothing changed in Redis
    assert refused_code(submission) is ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT
    assert submission.outcome is not None and submission.outcome.tool_call_id == "call_1"
    assert tool.calls.value == 1
    assert projector.calls.value == 1
    assert snapshot(redis_client, keys.record_key(key_of("call_1"))) == record


@pytest.mark.parametrize("form", FORMS)
def test_run_budget_exhausted_is_rejected(
    boundary: ToolBoundary,
    redis_client: redis.Redis,
    fakes: tuple[FakeTool, FakeProjector],
    form: str,
) -> None:
    # Given a run allowed two calls that has made them
    tool, projector = fakes
    run = make_run(max_tool_calls=2)
    for call_id in ("call_1", "call_2"):
        assert submit(boundary, call_id, run=run).accepted
    # When a third call is submitted
    with unchanged(redis_client):
        submission = submit(boundary, "call_3", as_form(VALID, form), run=run)
    # Then it is refused, no record is written, the budget is not consumed, the tool not run
    assert refused_code(submission) is ErrorCode.RUN_BUDGET_EXHAUSTED
    assert not redis_client.exists(keys.record_key(key_of("call_3")))
    assert tool.calls.value == 2
    assert projector.calls.value == 2


@pytest.mark.parametrize("form", FORMS)
def test_tool_budget_exhausted_is_rejected(
    boundary: ToolBoundary,
    redis_client: redis.Redis,
    registry: ToolRegistry,
    fakes: tuple[FakeTool, FakeProjector],
    form: str,
) -> None:
    # Given a run allowed one call of the search tool, which it made, and another tool
    tool, _ = fakes
    other, _ = register(registry, name="other")
    run = make_run(tools=(TOOL, "other"), max_calls_per_tool={TOOL: 1})
    assert submit(boundary, "call_1", run=run).accepted
    # When a second search call is submitted
    with unchanged(redis_client):
        submission = submit(boundary, "call_2", as_form(VALID, form), run=run)
    # Then it is refused and nothing changed
    assert refused_code(submission) is ErrorCode.TOOL_BUDGET_EXHAUSTED
    assert tool.calls.value == 1
    # And the other tool, within its own (absent) limit, still runs
    assert submit(boundary, "call_3", run=run, tool_name="other").accepted
    assert other.calls.value == 1


def test_zero_budget_refuses_the_first_call(
    boundary: ToolBoundary, redis_client: redis.Redis, fakes: tuple[FakeTool, FakeProjector]
) -> None:
    # Given a run allowed no tool calls at all
    # When a call is submitted
    submission = submit(boundary, run=make_run(max_tool_calls=0))
    # Then it is refused without writing anything
    assert_refused(submission, ErrorCode.RUN_BUDGET_EXHAUSTED, redis_client, *fakes, set())


def test_invoke_returns_the_refusal_as_an_outcome(
    boundary: ToolBoundary, redis_client: redis.Redis, fakes: tuple[FakeTool, FakeProjector]
) -> None:
    # Given a call the run is not authorized for
    call = ToolCallEnvelope(
        run_id=RUN_ID, tool_call_id="call_1", tool_name=TOOL, arguments=json.dumps(VALID)
    )
    # When it is invoked (submit + wait)
    outcome = boundary.invoke(call, make_run(tools=()), timeout=1)
    # Then the refusal comes back at once as the outcome, and no record exists to wait for
    assert outcome.error_code is ErrorCode.UNAUTHORIZED
    assert record_keys(redis_client) == set()
    assert boundary.outcome(RUN_ID, "call_1").error_code is ErrorCode.RECORD_NOT_FOUND
