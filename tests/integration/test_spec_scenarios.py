"""Every scenario of requirements 1-6 of the spec (and the progress scenarios of requirement 7),
one test named after each, on real Redis with the in-process dispatcher."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import boundary as boundary_package
from boundary import (
    CanonicalRecord,
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    Limits,
    Projection,
    ToolBoundary,
    ToolOutcome,
    ToolRegistry,
)
from boundary.store import RedisCanonicalStore, keys
from tests.support.helpers import (
    LEAKS,
    LEAKY_MESSAGE,
    RUN_ID,
    TOOL,
    FakeProjector,
    FakeTool,
    envelope,
    expiry_commands,
    key_of,
    make_boundary,
    make_run,
    monitored,
    no_evidence,
    record_keys,
    register,
    snapshot,
)

RAW = {"hits": [{"id": 7, "text": "timeout talking to db", "secret": "raw-only-marker"}]}
ARGS = {"query": "timeout", "service": "api"}


def invoke(
    boundary: ToolBoundary, tool_call_id: str = "call_1", arguments: Any = None, **run: Any
) -> ToolOutcome:
    call = envelope(tool_call_id, json.dumps(ARGS) if arguments is None else arguments)
    return boundary.invoke(call, make_run(**run), timeout=5)


def stored(store: RedisCanonicalStore, tool_call_id: str = "call_1") -> CanonicalRecord:
    record = store.get(key_of(tool_call_id))
    assert record is not None
    return record


# Requirement 1: ToolBoundary SHALL enforce explicit preflight before execution


def test_cross_run_tool_call_is_rejected(
    boundary: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a tool, and an envelope that names run-2 while the RunContext is run-1
    tool, projector = register(registry)
    call = envelope("call_1", json.dumps(ARGS), run_id="run-2")
    # When it is submitted
    submission = boundary.submit(call, make_run(RUN_ID))
    # Then a safe ERROR comes back, no canonical record exists (in either run), no tool ran
    assert submission.accepted is False
    assert submission.outcome == ToolOutcome.error("call_1", ErrorCode.RUN_ID_MISMATCH)
    assert set(redis_client.scan_iter()) == set()
    assert tool.calls.value == 0
    assert projector.calls.value == 0


@pytest.mark.parametrize("problem", ["unauthorized", "writable"])
def test_unauthorized_or_writable_tool_is_rejected(
    boundary: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis, problem: str
) -> None:
    # Given a tool the run is not authorized for, or one that is not read-only
    tool, projector = register(registry, read_only=problem != "writable")
    run = make_run(tools=() if problem == "unauthorized" else (TOOL,))
    secret_args = {"query": "DROP TABLE users", "token": "request-only-marker"}
    # When it is invoked
    outcome = boundary.invoke(envelope("call_1", secret_args), run, timeout=5)
    # Then ERROR comes back before execution, and the request is not shown to the agent
    code = ErrorCode.UNAUTHORIZED if problem == "unauthorized" else ErrorCode.NOT_READ_ONLY
    assert outcome == ToolOutcome.error("call_1", code)
    assert "request-only-marker" not in outcome.model_dump_json()
    assert set(redis_client.scan_iter()) == set()
    assert tool.calls.value == 0
    assert projector.calls.value == 0


# Requirement 2: Canonical invocation SHALL keep complete data in one record


def test_tool_begins_execution(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given a tool that reads its own canonical record while it runs
    seen: dict[str, Any] = {}

    def look(arguments: dict[str, Any]) -> None:
        seen["record"] = store.get(key_of("call_A.b-9"))
        seen["record_keys"] = record_keys(redis_client)
        seen["pttl"] = redis_client.pttl(keys.record_key(key_of("call_A.b-9")))

    register(registry, FakeTool(RAW, during=look))
    arguments = '{ "service": "api",\n  "query": "délai € timeout" }'
    # When a call passes preflight and the tool is about to execute
    outcome = invoke(boundary, "call_A.b-9", arguments)
    # Then exactly one record exists: PROJECTING, with the complete canonical request,
    # the exact framework id, and no agent result, raw response, evidence or error yet
    record: CanonicalRecord = seen["record"]
    assert seen["record_keys"] == {"tb:{run-1}:call:call_A.b-9"}
    assert record.status is InvocationStatus.PROJECTING
    assert record.request == '{"query":"délai € timeout","service":"api"}'
    assert record.tool_call_id == "call_A.b-9"
    assert record.run_id == RUN_ID
    assert record.tool_name == TOOL
    assert record.agent_result is None
    assert record.raw is None
    assert record.evidence_status is None
    assert record.error_code is None
    assert record.seq == 1
    assert record.created_at == record.updated_at
    # And its TTL was set when it was created
    assert 0 < seen["pttl"] <= 600_000
    assert outcome.status is InvocationStatus.READY


def test_projector_succeeds(
    boundary: ToolBoundary, registry: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Given a tool returning raw data and a projector returning a bounded result
    projection = Projection(
        evidence_status=EvidenceStatus.EVIDENCE_FOUND,
        result={"top": "timeout talking to db", "count": 1},
        scope={"service": "api"},
    )
    tool, projector = register(registry, FakeTool(RAW), FakeProjector(projection))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then the same record holds the complete raw data and the agent result, READY
    record = stored(store)
    assert record.status is InvocationStatus.READY
    assert record.evidence_status is EvidenceStatus.EVIDENCE_FOUND
    assert json.loads(record.raw or "") == RAW
    assert json.loads(record.agent_result or "") == projection.result
    assert json.loads(record.scope or "") == projection.scope
    assert record.request == '{"query":"timeout","service":"api"}'
    assert record.error_code is None
    assert record.updated_at >= record.created_at
    # And the projector saw the raw response and the parsed request
    assert projector.seen == [(RAW, ARGS)]
    assert tool.arguments == [ARGS]
    # And the boundary returns only the bounded result
    assert outcome == ToolOutcome(
        tool_call_id="call_1",
        status=InvocationStatus.READY,
        evidence_status=EvidenceStatus.EVIDENCE_FOUND,
        result=projection.result,
        scope=projection.scope,
    )
    assert "raw-only-marker" not in outcome.model_dump_json()


# Requirement 3: Invocation lifecycle and evidence semantics SHALL be enforced centrally


def test_no_evidence_projection_completes(
    boundary: ToolBoundary, registry: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Given a projector that finds nothing and says what it looked at
    scope = {"service": "api", "window": "1h", "query": "timeout"}
    tool, projector = register(registry, FakeTool({"hits": []}), FakeProjector(no_evidence(scope)))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then the record is READY with NO_EVIDENCE and keeps the scope
    record = stored(store)
    assert record.status is InvocationStatus.READY
    assert record.evidence_status is EvidenceStatus.NO_EVIDENCE
    assert json.loads(record.scope or "") == scope
    assert outcome.status is InvocationStatus.READY
    assert outcome.evidence_status is EvidenceStatus.NO_EVIDENCE
    assert outcome.scope == scope
    # And it was neither retried nor upgraded: one run, one projection
    assert tool.calls.value == 1
    assert projector.calls.value == 1
    # And it can only ever be a negative observation
    (fact,) = boundary.observe(make_run()).facts
    assert fact.negative is True
    assert fact.scope == scope
    assert boundary.observe(make_run()).evidence_count == 0


@pytest.mark.parametrize(
    ("returned", "error", "code"),
    [
        (None, RuntimeError(LEAKY_MESSAGE), ErrorCode.PROJECTION_FAILED),
        (None, KeyError("hits"), ErrorCode.PROJECTION_FAILED),
        (Projection(evidence_status=EvidenceStatus.ERROR), None, ErrorCode.INVALID_EVIDENCE_STATUS),
        ({"evidence_status": "FOUND_IT", "result": 1}, None, ErrorCode.INVALID_EVIDENCE_STATUS),
        ({"evidence_status": "ERROR", "result": 1}, None, ErrorCode.INVALID_EVIDENCE_STATUS),
        ({"result": {"hits": 1}}, None, ErrorCode.INVALID_EVIDENCE_STATUS),
        ("not a projection", None, ErrorCode.PROJECTION_FAILED),
        (
            Projection.model_construct(evidence_status="MAYBE", result=1, scope=None),  # type: ignore[arg-type]
            None,
            ErrorCode.INVALID_EVIDENCE_STATUS,
        ),
    ],
    ids=[
        "raises",
        "raises_key_error",
        "error_status",
        "unknown_status",
        "error_status_as_text",
        "no_status",
        "not_a_projection",
        "unvalidated_status",
    ],
)
def test_projection_fails(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    returned: Any,
    error: BaseException | None,
    code: ErrorCode,
) -> None:
    # Given a projector that throws, or returns an invalid evidence status
    _tool, _projector = register(registry, FakeTool(RAW), FakeProjector(returned, error=error))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then the same record becomes ERROR with a safe code and no agent result
    record = stored(store)
    assert record.status is InvocationStatus.ERROR
    assert record.evidence_status is EvidenceStatus.ERROR
    assert record.error_code is code
    assert record.agent_result is None
    # And the raw response stored before the failure stays Harness-only canonical data
    assert json.loads(record.raw or "") == RAW
    # And the agent gets only the code
    assert outcome == ToolOutcome.error("call_1", code)
    # And an ERROR record never becomes evidence
    assert boundary.observe(make_run()).facts == ()


# Requirement 4: Tool Call ID and Run ownership SHALL be preserved


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        # The same call again (key order and blanks aside): a plain duplicate
        ('{ "service": "api", "query": "timeout" }', ErrorCode.DUPLICATE_TOOL_CALL),
        # The id reused for other arguments: a conflict
        ('{"query": "something else"}', ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT),
    ],
)
def test_duplicate_tool_call_id_is_submitted(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
    arguments: str,
    code: ErrorCode,
) -> None:
    # Given a completed call
    tool, projector = register(registry, FakeTool(RAW))
    first = invoke(boundary)
    record_key = keys.record_key(key_of("call_1"))
    before = snapshot(redis_client, record_key)
    expires_before = redis_client.pexpiretime(record_key)
    # When a second invocation uses the same run id and framework id
    second = invoke(boundary, "call_1", arguments)
    # Then the tool is not executed again and ERROR comes back
    assert second == ToolOutcome.error("call_1", code)
    assert tool.calls.value == 1
    assert projector.calls.value == 1
    # And the first record is unchanged byte for byte, expiry included
    assert snapshot(redis_client, record_key) == before
    assert redis_client.pexpiretime(record_key) == expires_before
    assert boundary.outcome(RUN_ID, "call_1") == first


def test_duplicate_of_a_running_call_is_refused_while_it_runs(
    boundary: ToolBoundary, registry: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Given a tool that, while running, sees its own id submitted again
    answers: list[ToolOutcome] = []

    def resubmit(arguments: dict[str, Any]) -> None:
        answers.append(invoke(boundary, "call_1", '{"query": "again"}'))

    tool, _ = register(registry, FakeTool(RAW, during=resubmit))
    # When the first call runs
    first = invoke(boundary)
    # Then the second (other arguments) is refused and the first completes with its own request
    assert answers == [ToolOutcome.error("call_1", ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT)]
    assert tool.calls.value == 1
    assert first.status is InvocationStatus.READY
    assert stored(store).request == '{"query":"timeout","service":"api"}'


def test_failed_call_is_not_retried_under_the_same_id(
    boundary: ToolBoundary, registry: ToolRegistry
) -> None:
    # Given a call whose tool failed
    tool, _ = register(registry, FakeTool(error=RuntimeError("boom")))
    assert invoke(boundary).error_code is ErrorCode.TOOL_EXECUTION_FAILED
    # When the same id is submitted again
    again = invoke(boundary)
    # Then it is a duplicate: the boundary never retries under an existing id
    assert again.error_code is ErrorCode.DUPLICATE_TOOL_CALL
    assert tool.calls.value == 1


@pytest.mark.parametrize(
    "tool_call_id", ["call_A.b-9", "toolu_01A09q90qw90lq917835lq9", "0", "Z" * 128]
)
def test_framework_id_is_preserved(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
    tool_call_id: str,
) -> None:
    # Given a valid envelope with a framework id
    register(registry)
    # When it passes preflight and completes
    outcome = invoke(boundary, tool_call_id)
    # Then the Redis key and the record hold exactly that id, and so does the outcome
    assert record_keys(redis_client) == {f"tb:{{{RUN_ID}}}:call:{tool_call_id}"}
    assert redis_client.hget(f"tb:{{{RUN_ID}}}:call:{tool_call_id}", "tool_call_id") == (
        tool_call_id
    )
    assert stored(store, tool_call_id).tool_call_id == tool_call_id
    assert outcome.tool_call_id == tool_call_id
    assert boundary.outcome(RUN_ID, tool_call_id) == outcome


def test_ids_differing_only_in_case_are_different_calls(
    boundary: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given two framework ids that differ only in case
    tool, _ = register(registry)
    # When both are invoked
    first = invoke(boundary, "call_a")
    second = invoke(boundary, "call_A")
    # Then neither is normalised into the other: two records, two runs of the tool
    assert first.status is second.status is InvocationStatus.READY
    assert record_keys(redis_client) == {"tb:{run-1}:call:call_a", "tb:{run-1}:call:call_A"}
    assert tool.calls.value == 2


# Requirement 5: TTL and size limits SHALL fail closed


def test_read_does_not_renew_ttl(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given a completed call and its expiry time
    register(registry)
    invoke(boundary)
    record_key = keys.record_key(key_of("call_1"))
    original_expiry = redis_client.pexpiretime(record_key)
    time.sleep(0.05)  # a refresh would now move the expiry visibly later
    remaining = redis_client.pttl(record_key)
    # When it is read many times, through every read path
    with monitored(redis_client) as commands:
        for _ in range(20):
            store.get(key_of("call_1"))
            boundary.outcome(RUN_ID, "call_1", timeout=1)
            boundary.observe(make_run())
            store.progress(RUN_ID)
            store.run_summary(RUN_ID)
    # Then its expiry stayed where it was, and no expire/refresh operation was issued
    assert redis_client.pexpiretime(record_key) == original_expiry
    assert 0 < redis_client.pttl(record_key) <= remaining
    assert any(c.startswith("hgetall") for c in commands)
    assert expiry_commands(commands) == []


def test_raw_response_is_too_large(redis_client: redis.Redis, registry: ToolRegistry) -> None:
    # Given a 100-byte raw limit and a tool returning 60 two-byte characters (122 bytes)
    boundary, store = make_boundary(redis_client, registry, limits=Limits(max_raw_bytes=100))
    raw = "é" * 60
    _tool, projector = register(registry, FakeTool(raw))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then the record is ERROR/RESULT_TOO_LARGE and holds no raw field at all (no truncation)
    record = stored(store)
    assert record.status is InvocationStatus.ERROR
    assert record.error_code is ErrorCode.RESULT_TOO_LARGE
    assert redis_client.hexists(keys.record_key(key_of("call_1")), "raw") == 0
    # And the projector was never invoked, and the agent gets only the code
    assert projector.calls.value == 0
    assert outcome == ToolOutcome.error("call_1", ErrorCode.RESULT_TOO_LARGE)


def test_raw_response_beyond_the_record_limit_is_too_large(
    redis_client: redis.Redis, registry: ToolRegistry
) -> None:
    # Given a raw response within the raw limit, but making the record exceed its limit
    limits = Limits(max_raw_bytes=10_000, max_record_bytes=1_000)
    boundary, store = make_boundary(redis_client, registry, limits=limits)
    _tool, projector = register(registry, FakeTool({"blob": "x" * 2_000}))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then it fails closed the same way
    assert outcome.error_code is ErrorCode.RESULT_TOO_LARGE
    assert stored(store).raw is None
    assert projector.calls.value == 0


def test_raw_response_exactly_at_the_limit_is_kept_whole(
    redis_client: redis.Redis, registry: ToolRegistry
) -> None:
    # Given a raw limit, and a raw response whose canonical JSON is exactly that many bytes
    raw = "€" * 33  # '"' + 99 bytes + '"' = 101 bytes
    boundary, store = make_boundary(redis_client, registry, limits=Limits(max_raw_bytes=101))
    register(registry, FakeTool(raw))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then it is kept complete and projected
    assert outcome.status is InvocationStatus.READY
    assert stored(store).raw == json.dumps(raw, ensure_ascii=False)


def test_agent_result_is_too_large(redis_client: redis.Redis, registry: ToolRegistry) -> None:
    # Given a 64-byte agent result limit and a projector returning more (in UTF-8 bytes)
    boundary, store = make_boundary(
        redis_client, registry, limits=Limits(max_agent_result_bytes=64)
    )
    big = Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"t": "ü" * 30})
    _tool, _projector = register(registry, FakeTool(RAW), FakeProjector(big))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then the record is ERROR/RESULT_TOO_LARGE and the oversized result is not returned
    record = stored(store)
    assert record.status is InvocationStatus.ERROR
    assert record.error_code is ErrorCode.RESULT_TOO_LARGE
    assert record.agent_result is None
    assert outcome == ToolOutcome.error("call_1", ErrorCode.RESULT_TOO_LARGE)
    assert "ü" not in outcome.model_dump_json()


def test_agent_result_limit_counts_the_scope_too(
    redis_client: redis.Redis, registry: ToolRegistry
) -> None:
    # Given a small result whose scope pushes the agent-facing bytes over the limit
    boundary, _ = make_boundary(redis_client, registry, limits=Limits(max_agent_result_bytes=64))
    register(registry, FakeTool(RAW), FakeProjector(no_evidence({"query": "q" * 80})))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then it is too large as well
    assert outcome.error_code is ErrorCode.RESULT_TOO_LARGE


# Requirement 6: Tool and store failures SHALL return safe errors


def test_tool_execution_throws(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
) -> None:
    # Given a tool that raises after PROJECTING began (it checks that first)
    statuses: list[InvocationStatus] = []

    def check_projecting(arguments: dict[str, Any]) -> None:
        statuses.append(stored(store).status)

    _tool, projector = register(
        registry, FakeTool(RAW, error=RuntimeError(LEAKY_MESSAGE), during=check_projecting)
    )
    # When the call is invoked
    outcome = invoke(boundary)
    # Then the record becomes ERROR with the stable execution code, and no raw is returned
    assert statuses == [InvocationStatus.PROJECTING]
    record = stored(store)
    assert record.status is InvocationStatus.ERROR
    assert record.evidence_status is EvidenceStatus.ERROR
    assert record.error_code is ErrorCode.TOOL_EXECUTION_FAILED
    assert record.raw is None
    assert outcome == ToolOutcome.error("call_1", ErrorCode.TOOL_EXECUTION_FAILED)
    assert projector.calls.value == 0
    # And nothing of the exception reached the agent or the record
    for text in (outcome.model_dump_json(), *redis_client.hvals(keys.record_key(key_of("call_1")))):
        for leak in LEAKS:
            assert leak not in text


@pytest.mark.parametrize("error", [SystemExit(1), KeyboardInterrupt()], ids=repr)
def test_tool_calling_sys_exit_fails_like_any_tool_error(
    boundary: ToolBoundary,
    registry: ToolRegistry,
    store: RedisCanonicalStore,
    error: BaseException,
) -> None:
    # Given a tool that calls sys.exit() (or is interrupted) inside its own code
    _tool, projector = register(registry, FakeTool(RAW, error=error))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then the boundary is not torn down: the record is sealed ERROR like any tool failure
    assert outcome == ToolOutcome.error("call_1", ErrorCode.TOOL_EXECUTION_FAILED)
    assert stored(store).status is InvocationStatus.ERROR
    assert projector.calls.value == 0


def test_tool_returning_non_json_data_fails_safely(
    boundary: ToolBoundary, registry: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Given a tool returning something JSON cannot hold
    _tool, projector = register(registry, FakeTool({"at": object(), "nan": float("nan")}))
    # When the call is invoked
    outcome = invoke(boundary)
    # Then the record is ERROR with a serialization code and the projector never ran
    assert outcome == ToolOutcome.error("call_1", ErrorCode.SERIALIZATION_FAILED)
    assert stored(store).error_code is ErrorCode.SERIALIZATION_FAILED
    assert projector.calls.value == 0


# Requirement 6 (Stage 3A): reusable, and Redis stays inside the store


@pytest.mark.parametrize(
    "case", ["success", "no_evidence", "error", "duplicate", "ttl", "capacity"]
)
def test_fake_projector_tests_pass(
    redis_client: redis.Redis, registry: ToolRegistry, case: str
) -> None:
    # Given a fake tool and projector plugged in through the public API only
    boundary, store = make_boundary(
        redis_client, registry, limits=Limits(max_raw_bytes=200), ttl_s=30
    )
    projections = {
        "no_evidence": FakeProjector(no_evidence({"q": "x"})),
        "error": FakeProjector(error=ValueError("bad raw")),
    }
    raws = {"capacity": {"blob": "x" * 500}}
    tool, _projector = register(
        registry, FakeTool(raws.get(case, RAW)), projections.get(case, FakeProjector())
    )
    # When the call is invoked (twice for the duplicate case)
    outcome = invoke(boundary)
    if case == "duplicate":
        outcome = invoke(boundary)
    # Then the boundary applied the shared lifecycle, limits and TTL without any tool code
    record = stored(store)
    expected = {
        "success": (InvocationStatus.READY, EvidenceStatus.EVIDENCE_FOUND, None),
        "no_evidence": (InvocationStatus.READY, EvidenceStatus.NO_EVIDENCE, None),
        "error": (InvocationStatus.ERROR, EvidenceStatus.ERROR, ErrorCode.PROJECTION_FAILED),
        "duplicate": (InvocationStatus.ERROR, EvidenceStatus.ERROR, ErrorCode.DUPLICATE_TOOL_CALL),
        "ttl": (InvocationStatus.READY, EvidenceStatus.EVIDENCE_FOUND, None),
        "capacity": (InvocationStatus.ERROR, EvidenceStatus.ERROR, ErrorCode.RESULT_TOO_LARGE),
    }[case]
    assert (outcome.status, outcome.evidence_status, outcome.error_code) == expected
    assert tool.calls.value == 1
    if case == "duplicate":
        assert record.status is InvocationStatus.READY  # the first record stands
    if case == "ttl":
        assert 0 < redis_client.pttl(keys.record_key(key_of("call_1"))) <= 30_000


def test_redis_access_stays_inside_the_store() -> None:
    # Given the boundary package's sources
    root = Path(boundary_package.__file__).parent
    importers = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(name == "redis" or name.startswith("redis.") for name in names):
                importers.add(path.relative_to(root).as_posix())
    # When the modules importing redis are listed
    # Then only the Redis store does (its sync and asyncio sides, their shared error
    # translation, its server facts, memory watermark and runs' progress reads), and no
    # agent-facing model carries a client
    assert importers == {
        "store/redis.py",
        "store/_redis_common.py",
        "store/aio.py",
        "store/redis_facts.py",
        "store/redis_memory.py",
        "store/redis_progress.py",
    }
    for model in (ToolOutcome, Projection, boundary_package.Submission):
        assert not any("redis" in name.lower() for name in model.model_fields)


# Requirement 7: Run progress projection SHALL reference canonical records


def test_completed_calls_are_projected(boundary: ToolBoundary, registry: ToolRegistry) -> None:
    # Given a run that made three calls, in this order
    register(registry)
    for call_id in ("call_3", "call_1", "call_2"):
        assert invoke(boundary, call_id).status is InvocationStatus.READY
    # When the run's progress is observed
    facts = boundary.observe(make_run())
    # Then each READY record is a bounded fact, in execution order, without raw data
    assert [f.tool_call_id for f in facts.facts] == ["call_3", "call_1", "call_2"]
    assert all(f.result == {"count": 1} for f in facts.facts)
    assert "raw-only-marker" not in facts.model_dump_json()
    assert facts.excluded == {}


def test_indexed_identity_is_invalid(
    boundary: ToolBoundary, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    # Given a run with one good call, one ERROR call, one deleted record and one foreign identity
    register(registry)
    register(registry, FakeTool(error=RuntimeError("boom")), name="broken")
    run = make_run(tools=(TOOL, "broken"))
    assert boundary.invoke(envelope("good"), run, timeout=5).status is InvocationStatus.READY
    failed = boundary.invoke(envelope("failed", tool_name="broken"), run, timeout=5)
    assert failed.status is InvocationStatus.ERROR
    assert boundary.invoke(envelope("gone"), run, timeout=5).status is InvocationStatus.READY
    redis_client.delete(keys.record_key(key_of("gone")))
    far_future_ms = int((time.time() + 3600) * 1000)
    redis_client.zadd(keys.progress_key(RUN_ID), {f"run-2:foreign:{far_future_ms}": 99})
    # When the run's progress is observed
    facts = boundary.observe(run)
    # Then only the READY record of this run is a fact; the others are excluded by reason
    assert [f.tool_call_id for f in facts.facts] == ["good"]
    assert facts.excluded == {"error": 1, "missing": 1, "cross_run": 1}
