"""ERROR outcomes as failed Celery tasks that carry their error code and nothing else.

An operator filters Flower by "Failed" to find the calls that ended ERROR, so the project task
of such a call must end in FAILURE. Celery records a failure with its traceback in three
places: the result backend (``mark_as_failure(..., traceback)``), the ``task-failed`` event
(``traceback=``, which Flower shows) and the worker's log. The task raises ``ToolCallFailed``
(the code as its only argument) and this module keeps the traceback out of all three:

- the task's ``backend`` is the app's own, with ``mark_as_failure`` storing no traceback for a
  ``ToolCallFailed`` (the stored result is ``{"exc_type": "ToolCallFailed", "exc_message":
  ["RESULT_TOO_LARGE"], ...}`` with ``"traceback": null``);
- the task's ``Request`` (Celery's hook for custom request classes) drops the traceback from
  the exception info before the worker sends ``task-failed``;
- ``throws=(ToolCallFailed,)`` makes the worker log it as an expected error: one INFO line,
  no traceback.

The canonical record still decides every outcome; this is what monitoring sees.
"""

from __future__ import annotations

from typing import Any

from celery import Task
from celery.worker.request import Request

from boundary import ErrorCode


class ToolCallFailed(Exception):
    """The call ended ERROR with ``code``: the only thing a failed project task carries."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code

    @property
    def error_code(self) -> ErrorCode | None:
        try:
            return ErrorCode(self.code)
        except ValueError:
            return None


class _CodeOnlyBackend:
    """The app's result backend, storing a ``ToolCallFailed`` without its traceback.

    A thin view over ``app.backend`` (which Celery keeps per thread), made once per backend
    (``CodeOnlyFailures.backend``).
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def mark_as_failure(
        self, task_id: str, exc: BaseException, traceback: Any = None, **kw: Any
    ) -> Any:
        if isinstance(exc, ToolCallFailed):
            traceback = None
        return self._backend.mark_as_failure(task_id, exc, traceback, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


class CodeOnlyRequest(Request):  # type: ignore[misc]
    """Sends ``task-failed`` for a ``ToolCallFailed`` without a traceback."""

    def on_failure(
        self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False
    ) -> Any:
        exc = getattr(exc_info.exception, "exc", exc_info.exception)
        if isinstance(exc, ToolCallFailed):
            exc_info.traceback = None
            exc_info.tb = None
        return super().on_failure(
            exc_info, send_failed_event=send_failed_event, return_ok=return_ok
        )


class CodeOnlyFailures(Task):  # type: ignore[misc]
    """Base of a task whose ``ToolCallFailed`` is a FAILURE carrying its code only."""

    Request = CodeOnlyRequest
    throws = (ToolCallFailed,)

    #: The view last made, with the backend it wraps: read on every task's return, it is made
    #: again only when the backend differs (another thread's). One tuple, so a thread never
    #: sees one backend's view paired with another's.
    _code_only: tuple[Any, _CodeOnlyBackend] | None = None

    @property
    def backend(self) -> Any:
        backend = self._backend or self.app.backend
        made = self._code_only
        if made is not None and made[0] is backend:
            return made[1]
        view = _CodeOnlyBackend(backend)
        self._code_only = (backend, view)
        return view

    @backend.setter
    def backend(self, value: Any) -> None:
        self._backend = value
