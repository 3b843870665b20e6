"""The worker's start-up wait: how often it tries, how long it pauses, what it reports."""

from __future__ import annotations

import pytest

from tasks.worker.startup import Service, StartupUnavailable, wait_for_services


def down() -> None:
    raise ConnectionError("redis://:secret@host:1/0 refused")


def test_it_pauses_1_2_4_then_5_seconds_and_names_the_service_without_its_url() -> None:
    pauses: list[float] = []

    with pytest.raises(StartupUnavailable) as raised:
        wait_for_services([Service("broker", "host:1/0", down)], attempts=6, sleep=pauses.append)

    assert pauses == [1, 2, 4, 5, 5]
    assert raised.value.problem == "the broker at host:1/0 is unreachable after 6 attempt(s)"


def test_it_returns_once_every_service_answers() -> None:
    answers = iter([False, False, True])
    checked: list[str] = []

    def flaky() -> None:
        checked.append("store")
        if not next(answers):
            raise ConnectionError

    pauses: list[float] = []
    wait_for_services(
        [Service("store", "host:1/0", flaky), Service("broker", "host:2/0", lambda: None)],
        attempts=3,
        sleep=pauses.append,
    )

    assert checked == ["store"] * 3
    assert pauses == [1, 2]


def test_one_attempt_never_pauses() -> None:
    pauses: list[float] = []
    with pytest.raises(StartupUnavailable):
        wait_for_services([Service("store", "h:1/0", down)], attempts=1, sleep=pauses.append)
    assert pauses == []
