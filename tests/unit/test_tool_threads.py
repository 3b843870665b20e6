"""Tool threads: hung tools hold a bounded number of threads; later runs time out unstarted
rather than each starting a thread of its own."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from boundary.errors import ToolTimeout
from boundary.tool_threads import (
    ToolOverdue,
    ToolThreads,
    ToolThreadsExhausted,
    run_inline_here,
)


def test_hung_runs_hold_at_most_max_threads_and_later_runs_time_out() -> None:
    # Given at most three threads, all three held by hung tools
    threads = ToolThreads(max_threads=3)
    release = threading.Event()
    for _ in range(3):
        with pytest.raises(ToolTimeout):
            threads.run(lambda _: release.wait(30), None, 0.1)
    # When ten more runs come
    for _ in range(10):
        with pytest.raises(ToolTimeout):
            threads.run(lambda _: 1, None, 0.05)
    # Then no thread was started for them
    assert threads.started == 3
    # And once the hung tools return, their threads serve again
    release.set()
    assert threads.run(lambda _: "ok", None, 5) == "ok"
    assert threads.started == 3


def test_a_run_waiting_for_a_thread_gets_one_freed_within_its_time_limit() -> None:
    threads = ToolThreads(max_threads=1)
    release = threading.Event()
    with pytest.raises(ToolTimeout):
        threads.run(lambda _: release.wait(30), None, 0.05)
    threading.Timer(0.2, release.set).start()
    assert threads.run(lambda _: "ok", None, 10) == "ok"
    assert threads.started == 1


class FakeHost:
    """The pool side of an in-line run: counts replacements and retirements."""

    def __init__(self) -> None:
        self.replaced = threading.Event()
        self.retired = 0

    def replace(self) -> None:
        self.replaced.set()

    def retire(self) -> None:
        self.retired += 1


def test_an_in_line_run_is_ended_by_the_watchdog_while_it_still_runs() -> None:
    threads = ToolThreads(max_threads=2)
    host = FakeHost()
    ended = threading.Event()

    def overdue() -> str:
        ended.set()
        return "sealed"

    def tool(_: object) -> str:
        # It returns only once the watchdog has ended the call and replaced its thread.
        assert ended.wait(30) and host.replaced.wait(30)
        return "late"

    run_inline_here(host)
    try:
        # Given an in-line run that hangs past its limit of 0.05 s
        # When it comes back at last
        with pytest.raises(ToolOverdue) as late:
            threads.run(tool, None, 0.05, on_overdue=overdue)
        # Then the watchdog had ended it (its outcome is the run's), and its thread retires
        assert late.value.outcome == "sealed"
        assert host.retired == 1
        assert threads.overdue == 0 and threads.started == 0  # no tool thread was used
        # And a run in time returns its value on this thread
        assert threads.run(lambda _: threading.current_thread(), None, 5, on_overdue=overdue) is (
            threading.current_thread()
        )
    finally:
        run_inline_here(None)


def test_past_max_threads_overdue_runs_a_run_does_not_start_and_the_process_is_told() -> None:
    threads = ToolThreads(max_threads=1)
    told: list[int] = []
    threads.on_exhausted = told.append
    host, release = FakeHost(), threading.Event()
    started = threading.Event()

    def hung() -> None:
        run_inline_here(host)
        with pytest.raises(ToolOverdue):
            threads.run(lambda _: release.wait(30), None, 0.05, on_overdue=lambda: None)

    # Given one in-line run overdue (the bound is one)
    worker = threading.Thread(target=hung)
    worker.start()
    assert host.replaced.wait(30)
    run_inline_here(host)
    try:
        # When another run comes to this process
        with pytest.raises(ToolThreadsExhausted):
            threads.run(lambda _: started.set(), None, 5, on_overdue=lambda: None)
        # Then it never started, and the process was told once
        assert not started.is_set()
        assert told == [1]
        # And once the overdue run came back, runs start again
        release.set()
        worker.join(30)
        assert threads.run(lambda _: "ok", None, 5, on_overdue=lambda: None) == "ok"
    finally:
        release.set()
        run_inline_here(None)


@pytest.mark.parametrize(
    "wait_within",
    [
        # Each run gives up the GIL while it runs: the watchdog's thread could run then
        pytest.param(True, id="wait-in-the-run"),
        # A worker's steps: the tool returns at once, the store's round trips come between
        # runs, so a woken watchdog finds no run left in progress
        pytest.param(False, id="wait-between-runs"),
    ],
)
def test_in_line_runs_that_end_in_time_do_not_wake_the_watchdog_each(wait_within: bool) -> None:
    threads = ToolThreads()
    host = FakeHost()
    run_inline_here(host)

    def one_run() -> None:
        threads.run(
            lambda _: time.sleep(0.001) if wait_within else None,
            None,
            30.0,
            on_overdue=lambda: None,
        )
        if not wait_within:
            time.sleep(0.001)

    try:
        # Given a watchdog that has seen runs of a 30 s limit
        for _ in range(3):
            one_run()
        woken = threads.watchdog.wakes
        # When 300 more such runs start and end in time, one after the other
        for _ in range(300):
            one_run()
        # Then they woke the watchdog's thread at most a few times, not once each
        assert threads.watchdog.wakes - woken <= 3
        assert not host.replaced.is_set()
    finally:
        run_inline_here(None)


STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar("step", default=None)


def test_the_watchdog_ends_an_overdue_run_in_the_context_the_run_started_in() -> None:
    threads = ToolThreads()
    host = FakeHost()
    seen: list[str | None] = []
    token = STEP.set("execute of call 1")  # as a task's telemetry span is, on its thread
    run_inline_here(host)
    try:
        with pytest.raises(ToolOverdue):
            threads.run(
                lambda _: host.replaced.wait(30),
                None,
                0.05,
                on_overdue=lambda: seen.append(STEP.get()),
            )
        assert seen == ["execute of call 1"]
    finally:
        run_inline_here(None)
        STEP.reset(token)
