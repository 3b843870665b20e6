"""``CeleryDispatcher``: an accepted call becomes an execute -> project chain."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError

from boundary import CanonicalKey, DispatchError
from tasks.app import EXECUTE, PROJECT, PROJECTIONS_QUEUE, TOOLS_QUEUE


class CeleryDispatcher:
    """Sends each call as an execute -> project chain with deterministic task ids
    (``<run_id>:<tool_call_id>:execute`` and ``...:project``) and waits on the project task.

    Messages carry the canonical key only; ``argsrepr`` repeats just those ids.
    """

    def __init__(self, app: Celery | None = None) -> None:
        if app is None:
            from tasks.app import app as default_app

            app = default_app
        self.app = app

    def dispatch(self, key: CanonicalKey) -> None:
        """Sends the execute task with the project step riding in its ``chain`` option.

        This is the message ``(execute.si(...) | project.si(...)).apply_async()`` sends,
        field for field (headers, properties, body, the chained signature's options), built
        without the canvas: no signatures to clone, freeze and prepare per call.
        """
        ids = (key.run_id, key.tool_call_id)
        argsrepr = repr(ids)
        execute_id = key.task_id("execute")
        project = {
            "task": PROJECT,
            "args": list(ids),
            "kwargs": {},
            "options": {
                "task_id": key.task_id("project"),
                "queue": PROJECTIONS_QUEUE,
                "argsrepr": argsrepr,
                "kwargsrepr": "{}",
                "reply_to": self.app.thread_oid,
            },
            "subtask_type": None,
            "immutable": True,
        }
        try:
            self.app.send_task(
                EXECUTE,
                args=ids,
                task_id=execute_id,
                root_id=execute_id,
                queue=TOOLS_QUEUE,
                argsrepr=argsrepr,
                kwargsrepr="{}",
                # The execute task's own option: its result is never stored nor awaited.
                ignore_result=True,
                chain=[project],
            )
        except Exception:
            # kombu's errors name the broker URL: none of it goes further.
            raise DispatchError() from None

    def revoke(self, key: CanonicalKey) -> None:
        """Revokes both steps of a cancelled call: a worker drops them unstarted. A step that
        already runs is not terminated (its record is sealed, so its return changes nothing)."""
        try:
            self.app.control.revoke([key.task_id("execute"), key.task_id("project")])
        except Exception:
            raise DispatchError() from None

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        result = self.app.AsyncResult(key.task_id("project"))
        try:
            value = result.get(timeout=timeout, propagate=False, disable_sync_subtasks=False)
        except CeleryTimeoutError:
            # Stop waiting on it: a timed-out get keeps its subscription otherwise.
            self.app.backend.remove_pending_result(result)
            return None
        except Exception:
            # The result backend is unreachable: the caller reads the record instead.
            return None
        return value if isinstance(value, dict) else None
