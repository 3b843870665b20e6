"""The seal notification's message (``boundary.store.seal_message``) and the outcome a
waiter takes from it (``boundary.call_steps.outcome_from_message``)."""

from __future__ import annotations

from datetime import UTC, datetime

from boundary import ErrorCode, EvidenceStatus, InvocationStatus
from boundary.call_steps import outcome_from_message
from boundary.store.seal_message import SealMessage, call_of

CREATED_MS = 1_700_000_000_123
DAY_MS = 86_400_000


def _data(
    *,
    status: str = "READY",
    evidence: str = "EVIDENCE_FOUND",
    code: str = "",
    attempt: int = 2,
    ttl_ms: int = DAY_MS,
    result: str = '{"a":"x\\ny"}',
) -> str:
    return "\n".join(
        [
            "c1",
            str(ttl_ms),
            str(CREATED_MS),
            str(attempt),
            status,
            evidence,
            code,
            '{"k":1}',
            result,
        ]
    )


def test_a_message_names_its_call_whatever_its_form() -> None:
    assert call_of(_data()) == "c1"
    assert call_of("c1") == "c1"  # the older form: the id alone, a wake-up only
    assert SealMessage.parse("c1") is None
    assert SealMessage.parse("c1\nnot-a-number\n1\n1\nREADY\nNO_EVIDENCE\n\n\n") is None


def test_a_ready_message_gives_the_outcome_the_record_would() -> None:
    message = SealMessage.parse(_data())
    assert message is not None and message.current(watching_since=0.0, now=60.0)
    outcome = outcome_from_message(message)
    assert outcome is not None
    assert outcome.status is InvocationStatus.READY
    assert outcome.evidence_status is EvidenceStatus.EVIDENCE_FOUND
    assert outcome.result == {"a": "x\ny"} and outcome.scope == {"k": 1}


def test_an_error_message_gives_its_stable_code() -> None:
    message = SealMessage.parse(
        _data(status="ERROR", evidence="ERROR", code="TOOL_TIMEOUT", result="")
    )
    outcome = outcome_from_message(message)
    assert outcome is not None and outcome.error_code is ErrorCode.TOOL_TIMEOUT


def test_a_message_that_may_not_be_of_the_waiters_record_is_not_trusted() -> None:
    # A record whose TTL at its seal is shorter than the time since the waiter subscribed
    # may have expired and been created again: read instead
    short = SealMessage.parse(_data(ttl_ms=500))
    assert short is not None and not short.current(watching_since=0.0, now=0.1)
    # An unknown status or error code, or evidence that disagrees: read instead
    for bad in (
        _data(status="PROJECTING"),
        _data(status="ERROR", evidence="ERROR", code="NO_SUCH_CODE", result=""),
        _data(evidence="ERROR"),
    ):
        assert outcome_from_message(SealMessage.parse(bad)) is None
    assert outcome_from_message(None) is None


class _Read:
    """What ``outcome_from_message`` looks at of the record a waiter read."""

    def __init__(self, created_ms: int, attempt: int) -> None:
        self.created_at = datetime.fromtimestamp(created_ms / 1000, tz=UTC)
        self.attempt = attempt


def test_a_message_of_another_record_or_an_older_attempt_is_not_trusted() -> None:
    message = SealMessage.parse(_data(attempt=2))
    assert outcome_from_message(message, _Read(CREATED_MS, 2)) is not None  # type: ignore[arg-type]
    assert outcome_from_message(message, _Read(CREATED_MS, 1)) is not None  # type: ignore[arg-type]
    assert outcome_from_message(message, _Read(CREATED_MS, 3)) is None  # type: ignore[arg-type]
    assert outcome_from_message(message, _Read(CREATED_MS + 1, 2)) is None  # type: ignore[arg-type]
