"""The code-only view of a task's result backend is made once per backend, not on every read
of ``Task.backend`` (each task's return reads it), and follows the backend when it changes."""

from __future__ import annotations

from typing import Any

from tasks.wiring.failures import ToolCallFailed
from tasks.worker.calls import project_result


class _Backend:
    def __init__(self) -> None:
        self.failures: list[tuple[str, Any]] = []

    def mark_as_failure(self, task_id: str, exc: BaseException, traceback: Any = None) -> None:
        self.failures.append((task_id, traceback))


def test_the_view_is_kept_per_backend_and_still_drops_the_traceback() -> None:
    task: Any = project_result
    saved = task._backend
    first, second = _Backend(), _Backend()
    try:
        task.backend = first
        view = task.backend
        assert task.backend is view
        view.mark_as_failure("t1", ToolCallFailed("BOOM"), "a traceback")
        view.mark_as_failure("t2", ValueError("x"), "kept")
        assert first.failures == [("t1", None), ("t2", "kept")]
        task.backend = second
        other = task.backend
        assert other is not view
        other.mark_as_failure("t3", ToolCallFailed("BOOM"), "a traceback")
        assert second.failures == [("t3", None)] and len(first.failures) == 2
    finally:
        task.backend = saved
