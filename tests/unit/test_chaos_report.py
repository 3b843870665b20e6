"""The chaos run's count of duplicate executions (``bench.studies.chaos.report.duplicates``): what
the retry policies and a killed process allow, and what they do not."""

from __future__ import annotations

from bench.studies.chaos.report import duplicates
from bench.studies.chaos.tools import LONG, SHORT

CALL = ("run-1", "c1")


def test_one_execution_per_attempt_is_no_duplicate() -> None:
    assert duplicates({CALL: {1: (1, 1)}}, {CALL: SHORT}) == (0, [])


def test_an_execution_killed_with_its_process_may_run_again() -> None:
    # Given attempt 1 started twice and ran to its end once (the first run's process died)
    counted = {CALL: {1: (2, 1)}}
    # Then nothing is counted
    assert duplicates(counted, {CALL: SHORT})[0] == 0


def test_two_executions_of_one_attempt_that_both_ended_are_one_duplicate() -> None:
    total, calls = duplicates({CALL: {1: (3, 3)}}, {CALL: SHORT})
    assert total == 2
    assert calls == ["run-1:c1 [(1, (3, 3))]"]


def test_attempts_within_the_retry_policy_are_allowed_and_beyond_it_are_not() -> None:
    # The long tool retries up to 3 attempts; a re-sent message that never ran takes an
    # attempt number but no execution (attempt 2 here)
    within = {CALL: {1: (1, 0), 3: (1, 0), 4: (1, 1)}}
    beyond = {CALL: {1: (1, 0), 2: (1, 0), 3: (1, 0), 4: (1, 1)}}
    assert duplicates(within, {CALL: LONG})[0] == 0
    assert duplicates(beyond, {CALL: LONG})[0] == 1
    # And a tool without retries may run one attempt only
    assert duplicates({CALL: {1: (1, 0), 2: (1, 1)}}, {CALL: SHORT})[0] == 1
