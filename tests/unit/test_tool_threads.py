"""Tool threads: hung tools hold a bounded number of threads; later runs time out unstarted
rather than each starting a thread of its own."""

from __future__ import annotations

import threading

import pytest

from boundary.errors import ToolTimeout
from boundary.tool_threads import ToolThreads


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
