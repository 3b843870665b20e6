"""Checks that the services a command needs answer, before it starts to use them.

A command that finds the broker closed should say so in one line at once, not after a
kombu traceback or a 30-second wait per call.
"""

from __future__ import annotations

from typing import Any

from boundary import BoundaryError, ErrorCode
from tasks.wiring.app import PROJECTIONS_QUEUE, TOOLS_QUEUE

#: Seconds to wait for workers to answer a ping.
WORKER_PING_TIMEOUT_S = 3.0
#: The queues a call's chain needs consumers for.
CALL_QUEUES = (TOOLS_QUEUE, PROJECTIONS_QUEUE)
#: The result backend key the start-up check reads (never written).
CHECK_KEY = "celery-task-meta-tool-boundary-check"


class ServiceUnavailable(BoundaryError):
    """A service a command needs does not answer.

    Attributes:
        part: ``"broker"``, ``"result backend"`` or ``"workers"``.
        hint: what to do about it, for the operator; never a URL or a driver's text.
    """

    code = ErrorCode.DISPATCH_FAILED

    def __init__(self, part: str, hint: str = "") -> None:
        super().__init__()
        self.part = part
        self.hint = hint


def check_broker(app: Any, timeout_s: float, retries: int = 1) -> None:
    """Connects to the app's broker, retrying ``retries`` times 2 s apart (no retry loop)."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=retries, timeout=timeout_s)
    except Exception:
        # kombu's text names the broker URL: only the part goes further.
        raise ServiceUnavailable("broker") from None


def check_result_backend(app: Any) -> None:
    """Reads one key of the result backend (a Redis one), which connects to it: a key of the
    backend's own names (``celery-task-meta-*``), which an ACL user of the worker or the caller
    may read (``docs/how-to/production-redis.acl``)."""
    try:
        app.backend.get(CHECK_KEY)
    except Exception:
        raise ServiceUnavailable("result backend") from None


def check_workers(
    app: Any, timeout_s: float = WORKER_PING_TIMEOUT_S, queues: tuple[str, ...] = CALL_QUEUES
) -> None:
    """Some worker consumes each of ``queues`` (the call queues: ``tools`` and
    ``projections``)."""
    try:
        replies = app.control.inspect(timeout=timeout_s).active_queues() or {}
    except Exception:
        raise ServiceUnavailable("broker") from None
    consumed = {queue.get("name") for queues in replies.values() for queue in (queues or ())}
    missing = [name for name in queues if name not in consumed]
    if missing:
        raise ServiceUnavailable(
            "workers",
            f"no worker consumes {', '.join(missing)}: start one with "
            f"celery -A tasks worker -Q {','.join(queues)}",
        )
