"""``gathered_call_sync``: calls of one model turn reaching a run handle from several threads
go as one turn; a call that cannot come costs the turn a short wait, never a hang."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from boundary.adapters._common import Call
from boundary.adapters._gather import gathered_call_sync
from boundary.errors import ErrorCode
from boundary.models import ToolOutcome


class Handle:
    """Records each ``call_many`` (a turn); answers each call READY under its id."""

    def __init__(self) -> None:
        self.turns: list[list[str]] = []
        self._lock = threading.Lock()

    def call_many(self, calls: Any, *, timeout: float | None = None) -> list[ToolOutcome]:
        with self._lock:
            self.turns.append([call_id for call_id, _, _ in calls])
        return [ToolOutcome.error(call_id, ErrorCode.CANCELLED) for call_id, _, _ in calls]


def test_the_calls_a_turn_lists_go_as_one_turn_each_answered_under_its_id() -> None:
    # Given a handle and the three calls of one model turn, each on a thread of its own
    handle = Handle()
    expected = frozenset({"a", "b", "c"})
    start = threading.Barrier(3)

    def one(call_id: str) -> str | None:
        start.wait()
        outcome = gathered_call_sync(handle, Call(call_id, "find", {}), expected, window_s=10)  # type: ignore[arg-type]
        return outcome.tool_call_id

    # When they reach the handle together
    with ThreadPoolExecutor(3) as pool:
        answered = list(pool.map(one, ["a", "b", "c"]))

    # Then one turn carried all three, and each thread got its own call's outcome
    assert len(handle.turns) == 1 and sorted(handle.turns[0]) == ["a", "b", "c"]
    assert answered == ["a", "b", "c"]


def test_a_listed_call_that_never_comes_holds_the_turn_only_for_the_window() -> None:
    # Given a turn that lists two calls, of which only one ever reaches the handle
    handle = Handle()

    # When it arrives
    outcome = gathered_call_sync(
        handle,  # type: ignore[arg-type]
        Call("a", "find", {}),
        frozenset({"a", "b"}),
        window_s=0.01,
    )

    # Then it went alone once the window passed, and the next call starts a new turn
    assert outcome.tool_call_id == "a" and handle.turns == [["a"]]
    gathered_call_sync(handle, Call("b", "find", {}), frozenset({"b"}))  # type: ignore[arg-type]
    assert handle.turns == [["a"], ["b"]]
