"""The public models: frozen, validated at the edges, ids safe and exact, errors fixed text."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from boundary import (
    BoundaryError,
    CanonicalKey,
    CanonicalRecord,
    DispatchError,
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    ObservedFact,
    ObservedFacts,
    Projection,
    RunContext,
    StoreError,
    StoreUnavailable,
    Submission,
    ToolOutcome,
    ToolTimeout,
)
from boundary.errors import ERROR_MESSAGES, PREFLIGHT_CODES, SEAL_CODES, failure_name
from boundary.models import READY_EVIDENCE, TERMINAL_STATUSES, is_safe_id
from boundary.store import keys
from tests.support.helpers import LEAKS

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_enums_are_string_enums_with_their_own_names() -> None:
    # Given the status enums and the error codes
    # When compared with plain strings
    # Then each member equals its own name (stable strings on the wire)
    assert InvocationStatus.READY == "READY"
    assert EvidenceStatus.NO_EVIDENCE == "NO_EVIDENCE"
    for enum in (InvocationStatus, EvidenceStatus, ErrorCode):
        for member in enum:
            assert member.value == member.name


def test_terminal_statuses_and_ready_evidence() -> None:
    # Given the lifecycle table
    # When its sets are read
    # Then READY and ERROR are terminal, and READY carries found-or-none evidence only
    assert frozenset({InvocationStatus.READY, InvocationStatus.ERROR}) == TERMINAL_STATUSES
    assert InvocationStatus.PROJECTING not in TERMINAL_STATUSES
    assert frozenset({EvidenceStatus.EVIDENCE_FOUND, EvidenceStatus.NO_EVIDENCE}) == (
        READY_EVIDENCE
    )


def test_every_error_code_has_a_fixed_safe_sentence() -> None:
    # Given every error code
    # When its message is read
    # Then it is a fixed sentence without keys, URLs, payloads or traces
    assert set(ERROR_MESSAGES) == set(ErrorCode)
    for code in ErrorCode:
        assert code.message == ERROR_MESSAGES[code]
        assert code.message
        for leak in (*LEAKS, "redis://", "{", "}"):
            assert leak not in code.message


def test_preflight_and_seal_codes_partition_the_codes_sensibly() -> None:
    # Given the code sets
    # When compared
    # Then RECORD_NOT_FOUND is a lookup code only, and a few codes may occur in both places
    assert ErrorCode.RECORD_NOT_FOUND not in PREFLIGHT_CODES | SEAL_CODES
    assert PREFLIGHT_CODES | SEAL_CODES | {ErrorCode.RECORD_NOT_FOUND} == set(ErrorCode)
    assert {
        ErrorCode.RUN_DEADLINE_EXCEEDED,
        ErrorCode.STORE_UNAVAILABLE,
    } == PREFLIGHT_CODES & SEAL_CODES


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        ("call_A.b-9", True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("", False),
        (None, False),
        (42, False),
        ("a:b", False),
        ("a\n", False),
        ("a{b}", False),
        ("é", False),
    ],
)
def test_is_safe_id(value: object, safe: bool) -> None:
    # Given a candidate id
    # When it is checked
    # Then only the design's pattern passes
    assert is_safe_id(value) is safe


def test_canonical_key_keeps_ids_exactly_and_round_trips_its_identity() -> None:
    # Given a key built from framework ids
    key = CanonicalKey(run_id="run-7.A", tool_call_id="call_A.b-9")
    # When its identity and task ids are derived
    # Then they hold the exact ids, and the identity parses back to the same key
    assert key.identity == "run-7.A:call_A.b-9"
    assert CanonicalKey.from_identity(key.identity) == key
    assert key.task_id("execute") == "run-7.A:call_A.b-9:execute"
    assert keys.record_key(key) == "tb:{run-7.A}:call:call_A.b-9"


@pytest.mark.parametrize(
    "ids", [("run:1", "c"), ("r", "c:1"), ("r", ""), ("", "c"), ("r", "a b"), ("r", "a\n")]
)
def test_canonical_key_refuses_unsafe_ids(ids: tuple[str, str]) -> None:
    # Given an unsafe run id or call id
    # When a key is built
    # Then validation fails: no key is ever made of them
    with pytest.raises(ValidationError):
        CanonicalKey(run_id=ids[0], tool_call_id=ids[1])


def test_models_are_frozen_and_forbid_extra_fields() -> None:
    # Given a frozen model
    key = CanonicalKey(run_id="r", tool_call_id="c")
    # When it is changed, or built with an unknown field
    # Then both fail
    with pytest.raises(ValidationError):
        key.run_id = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        CanonicalKey(run_id="r", tool_call_id="c", extra="x")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, raw="x")  # type: ignore[call-arg]


def test_run_context_validates_deadline_and_budgets() -> None:
    # Given run settings
    # When the deadline is naive or a budget negative
    # Then the run context is refused
    with pytest.raises(ValidationError):
        RunContext(run_id="r", deadline=datetime(2030, 1, 1))
    with pytest.raises(ValidationError):
        RunContext(run_id="r", max_tool_calls=-1)
    with pytest.raises(ValidationError):
        RunContext(run_id="r", max_calls_per_tool={"t": -1})
    # And the defaults are an active run, no deadline, no tools, no limits
    run = RunContext(run_id="r")
    assert run.active is True
    assert run.deadline is None
    assert run.authorized_tools == frozenset()
    assert run.max_tool_calls is None
    assert run.max_calls_per_tool == {}


def test_error_outcome_carries_only_the_code() -> None:
    # Given an error outcome
    outcome = ToolOutcome.error("call_1", ErrorCode.TOOL_EXECUTION_FAILED)
    # When it is read
    # Then it is ERROR with evidence ERROR, no result, and the code's fixed sentence
    assert outcome.status is InvocationStatus.ERROR
    assert outcome.evidence_status is EvidenceStatus.ERROR
    assert outcome.result is None
    assert outcome.scope is None
    assert outcome.error_message == ErrorCode.TOOL_EXECUTION_FAILED.message
    assert ToolOutcome.model_validate_json(outcome.model_dump_json()) == outcome


def test_ready_outcome_has_no_error_message() -> None:
    # Given a READY outcome
    outcome = ToolOutcome(
        tool_call_id="c",
        status=InvocationStatus.READY,
        evidence_status=EvidenceStatus.NO_EVIDENCE,
        result={"hits": []},
        scope={"query": "q"},
    )
    # When its error message is read
    # Then there is none
    assert outcome.error_code is None
    assert outcome.error_message is None


def test_projection_validates_its_evidence_status() -> None:
    # Given a projection with a status that is not an evidence status
    # When it is built
    # Then it is refused; a string of a valid status becomes the enum
    with pytest.raises(ValidationError):
        Projection(evidence_status="FOUND_IT")  # type: ignore[arg-type]
    projection = Projection.model_validate({"evidence_status": "NO_EVIDENCE"})
    assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE


def test_canonical_record_exposes_its_key() -> None:
    # Given a record
    record = CanonicalRecord(
        run_id="r",
        tool_call_id="call_A.b-9",
        tool_name="t",
        status=InvocationStatus.PROJECTING,
        request="{}",
        seq=1,
        created_at=NOW,
        updated_at=NOW,
    )
    # When its key is read
    # Then it is the exact identity, and nothing of the result exists yet
    assert record.key == CanonicalKey(run_id="r", tool_call_id="call_A.b-9")
    assert record.raw is None
    assert record.agent_result is None
    assert record.error_code is None


def test_submission_and_observed_facts() -> None:
    # Given a refused submission and some facts
    refused = Submission(
        key=None, accepted=False, outcome=ToolOutcome.error(None, ErrorCode.UNKNOWN_TOOL)
    )
    facts = ObservedFacts(
        run_id="r",
        facts=(
            ObservedFact(
                tool_call_id="a", tool_name="t", evidence_status=EvidenceStatus.EVIDENCE_FOUND
            ),
            ObservedFact(
                tool_call_id="b", tool_name="t", evidence_status=EvidenceStatus.NO_EVIDENCE
            ),
        ),
    )
    # When they are read
    # Then the refusal carries its outcome, and NO_EVIDENCE facts are negative, not evidence
    assert refused.outcome is not None
    assert refused.outcome.error_code is ErrorCode.UNKNOWN_TOOL
    assert [f.negative for f in facts.facts] == [False, True]
    assert facts.evidence_count == 1
    assert facts.excluded == {}
    assert facts.omitted == 0


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (StoreUnavailable(), ErrorCode.STORE_UNAVAILABLE),
        (StoreError(), ErrorCode.STORE_UNAVAILABLE),
        (DispatchError(), ErrorCode.DISPATCH_FAILED),
        (ToolTimeout(), ErrorCode.TOOL_TIMEOUT),
        (BoundaryError(ErrorCode.WORKER_LOST), ErrorCode.WORKER_LOST),
    ],
)
def test_exceptions_share_one_root_and_say_only_their_code(
    error: BoundaryError, code: ErrorCode
) -> None:
    # Given a boundary exception
    # When it is read
    # Then its code is in an attribute and its message is the code alone
    assert isinstance(error, BoundaryError)
    assert error.code is code
    assert str(error) == code.value


def test_a_dispatch_error_names_what_failed_under_it_by_type_only() -> None:
    # Given a dispatch that failed under a broker error whose text names the broker
    error = DispatchError("OperationalError")
    # Then its code and message are the code alone, and the log names both types
    assert str(error) == "DISPATCH_FAILED" and error.code is ErrorCode.DISPATCH_FAILED
    assert failure_name(error) == "DispatchError: OperationalError"
    # And any other error is named by its type, never its text
    assert failure_name(DispatchError()) == "DispatchError"
    assert failure_name(ValueError("redis://:secret@host")) == "ValueError"
