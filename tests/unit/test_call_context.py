"""The call context's pure parts: what a heartbeat keeps of hostile input, its coalescing, and
how it stops a tool. The store here only records what it is asked (the real store's scripts
are tested in tests/integration/test_heartbeats.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from boundary import CallCancelled, CanonicalKey, StoreUnavailable, current_call, heartbeat
from boundary.call_context import (
    MAX_PROGRESS_MESSAGE_BYTES,
    CallScope,
    Ended,
    progress_fraction,
    progress_message,
)
from boundary.store.base import WriteStatus

KEY = CanonicalKey(run_id="run-1", tool_call_id="call-1")


class RecordingStore:
    """Answers every heartbeat with ``answer`` and keeps what it was asked."""

    def __init__(self, answer: WriteStatus | Exception = WriteStatus.OK) -> None:
        self.answer = answer
        self.beats: list[dict[str, Any]] = []

    def heartbeat(self, key: CanonicalKey, **terms: Any) -> WriteStatus:
        self.beats.append(terms)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def scope(store: RecordingStore, clock: Clock, **options: Any) -> CallScope:
    return CallScope(
        store,  # type: ignore[arg-type]
        KEY,
        tool_name="crawl",
        attempt=1,
        time_limit_s=options.pop("time_limit_s", 60.0),
        clock=clock,
        **options,
    )


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        (0.25, 0.25),
        (2, 1.0),
        (-3.5, 0.0),
        (math.inf, 1.0),
        (math.nan, None),
        ("0.5", None),
        (True, None),
        (None, None),
        ([0.5], None),
    ],
)
def test_a_fraction_is_clamped_and_anything_else_is_ignored(given: object, kept: object) -> None:
    assert progress_fraction(given) == kept


def test_a_message_is_a_bounded_printable_string_or_nothing() -> None:
    huge = progress_message("é" * 1_000_000)
    assert huge is not None
    assert len(huge.encode("utf-8")) <= MAX_PROGRESS_MESSAGE_BYTES
    assert huge == "é" * (MAX_PROGRESS_MESSAGE_BYTES // 2)  # cut at a character boundary
    assert progress_message("page 3\x1b[2J\r\n of 9\x00") == "page 3[2J of 9"
    assert progress_message(b"bytes") is None
    assert progress_message(42) is None
    assert progress_message("\x00\x01") is None


def test_heartbeats_in_a_tight_loop_write_once_per_interval_with_the_latest_values() -> None:
    store, clock = RecordingStore(), Clock()
    running = scope(store, clock, interval_s=1.0)
    with running.active():
        for i in range(1000):
            heartbeat(progress=i / 1000, message=f"item {i}")
        clock.now += 1.0
        heartbeat()
    assert len(store.beats) == 2
    assert store.beats[0]["progress"] == 0.0 and store.beats[0]["message"] == "item 0"
    assert store.beats[1]["progress"] == 0.999 and store.beats[1]["message"] == "item 999"


def test_hostile_heartbeats_never_raise_and_store_bounded_values() -> None:
    store, clock = RecordingStore(), Clock()
    with scope(store, clock).active():
        heartbeat(progress=math.nan, message="x" * 1_000_000)  # type: ignore[arg-type]
        clock.now += 2
        heartbeat(progress="fast", message={"secret": "s"})  # type: ignore[arg-type]
    first, second = store.beats
    assert first["progress"] is None
    assert len(first["message"].encode("utf-8")) == MAX_PROGRESS_MESSAGE_BYTES
    # a bad value never replaces a good one
    assert second["message"] == first["message"]


def test_a_store_failure_is_never_raised_into_the_tool() -> None:
    store, clock = RecordingStore(StoreUnavailable()), Clock()
    with scope(store, clock).active():
        heartbeat(progress=0.5)
        clock.now += 2
        heartbeat(progress=0.6)
    assert len(store.beats) == 2


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (WriteStatus.NOT_PROJECTING, Ended.SEALED),
        (WriteStatus.MISSING, Ended.SEALED),
        (WriteStatus.SUPERSEDED, Ended.SUPERSEDED),
    ],
)
def test_a_heartbeat_stops_the_tool_once_the_call_is_not_its_own(
    answer: WriteStatus, why: Ended
) -> None:
    store, clock = RecordingStore(answer), Clock()
    running = scope(store, clock)
    with running.active(), pytest.raises(CallCancelled):
        heartbeat(progress=0.1)
    assert running.ended is why
    # and every later heartbeat raises at once, without asking the store again
    with running.active(), pytest.raises(CallCancelled):
        heartbeat()
    assert len(store.beats) == 1


def test_the_tool_is_stopped_at_its_next_heartbeat_once_its_time_is_up() -> None:
    store, clock = RecordingStore(), Clock()
    running = scope(store, clock, time_limit_s=5.0)
    with running.active():
        heartbeat()
        info = current_call()
        assert info is not None and info.time_left_s == 5.0
        clock.now += 5.0
        with pytest.raises(CallCancelled):
            heartbeat()
    assert running.ended is Ended.TIME_UP


def test_outside_a_tool_heartbeat_does_nothing_and_there_is_no_current_call() -> None:
    heartbeat(progress=0.5, message="nobody listens")
    assert current_call() is None


def test_current_call_names_the_running_call() -> None:
    running = scope(RecordingStore(), Clock())
    with running.active():
        info = current_call()
    assert info is not None
    assert (info.run_id, info.tool_call_id, info.tool_name, info.attempt) == (
        "run-1",
        "call-1",
        "crawl",
        1,
    )
    assert current_call() is None
