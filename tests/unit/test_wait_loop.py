"""``boundary.waits.wait_sealed``, the one loop of every blocking seal wait: the record
decides, a wake-up that carries the outcome ends the wait without a read, and a wait out of
time answers from its last read (reading once when it had not read yet)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from boundary import CanonicalRecord, ErrorCode, InvocationStatus, ToolOutcome
from boundary.waits import polling, wait_sealed


def projecting(call_id: str = "c1") -> CanonicalRecord:
    now = datetime.now(UTC)
    return CanonicalRecord(
        run_id="r1",
        tool_call_id=call_id,
        tool_name="t",
        status=InvocationStatus.PROJECTING,
        request="{}",
        seq=1,
        created_at=now,
        updated_at=now,
    )


class Reads:
    """Answers each read with the next of ``answers`` (the last one from then on)."""

    def __init__(self, *answers: ToolOutcome | CanonicalRecord | None) -> None:
        self.answers = list(answers)
        self.count = 0

    def __call__(self) -> ToolOutcome | CanonicalRecord | None:
        self.count += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_the_record_decides_after_a_wake_up_that_carries_nothing() -> None:
    sealed = ToolOutcome.error("c1", ErrorCode.TOOL_TIMEOUT)
    reads = Reads(projecting(), sealed)
    wakes: list[float] = []

    def wake(slice_s: float, record: CanonicalRecord | None) -> ToolOutcome | None:
        wakes.append(slice_s)
        return None

    done = wait_sealed(reads, wake, lambda r: r, give_up=None, slice_s=0.25)

    assert done == sealed
    assert reads.count == 2 and wakes == [0.25]


def test_a_wake_up_that_carries_the_outcome_ends_the_wait_without_a_read() -> None:
    carried = ToolOutcome.error("c1", ErrorCode.CANCELLED)
    reads = Reads(projecting())
    seen: list[CanonicalRecord | None] = []

    def wake(slice_s: float, record: CanonicalRecord | None) -> ToolOutcome | None:
        seen.append(record)
        return carried

    done = wait_sealed(reads, wake, lambda r: r, give_up=None, slice_s=1.0)

    assert done == carried
    # The wake-up was given the PROJECTING record last read (to tell its seal from another's)
    assert reads.count == 1 and seen == [reads.answers[0]]


def test_a_wait_out_of_time_answers_from_its_last_read() -> None:
    record = projecting()
    reads = Reads(record)

    done = wait_sealed(reads, polling(0.01), lambda r: ("running", r), give_up=0.0, slice_s=1.0)

    assert done == ("running", record) and reads.count == 1


def test_a_wait_out_of_time_before_its_first_read_reads_once() -> None:
    record = projecting()
    reads = Reads(record)

    done = wait_sealed(
        reads,
        polling(0.01),
        lambda r: r,
        give_up=time.monotonic() - 1,
        slice_s=1.0,
        read_first=False,
    )

    assert done is record and reads.count == 1


def test_a_missing_record_is_waited_on_by_a_reader_that_says_so() -> None:
    # The result backend's reader answers None for a missing record: a PENDING task
    reads = Reads(None)

    done = wait_sealed(
        reads, polling(0.001), lambda r: "pending", give_up=time.monotonic() + 0.05, slice_s=0.01
    )

    assert done == "pending" and reads.count >= 2
