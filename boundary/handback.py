"""Hand-backs: a draining worker gives each call it still runs to another worker.

A worker told to stop (SIGTERM: ``tasks.worker.drain``) lets its running calls finish for
``TOOL_BOUNDARY_WORKER_DRAIN_S``; then it calls ``begin()`` and ends each in-line run still in
progress through the watchdog (``ToolThreads.watchdog.end_now``) as if its time were up. The
execute step's overdue handler asks ``draining()`` first and, while the run still has time,
calls ``hand_back`` instead of timing the call out: the attempt is given up in the store
(fenced, as the lease's expiry would but now: ``retry.lua`` with the counter ``handbacks``,
which the tool's retry policy does not count), the limited tool's slot is released and the
next attempt sent at once (``steps.send_attempt``, the reaper's path), and the tool is
cancelled through its cancellation path (its next heartbeat raises ``CallCancelled``; the
pool interrupts or lets go of the run: ``InlineHost.replace``). Counted: the record's
``handbacks``, the metric ``tool_boundary_handbacks_total{tool}``, and the execute task fails
with the code ``HANDED_BACK`` (Flower).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from boundary import telemetry
from boundary.call_context import CallScope, Ended
from boundary.store.base import WriteStatus
from boundary.telemetry.names import HANDBACKS

if TYPE_CHECKING:
    from boundary.models import CanonicalKey
    from boundary.store.base import CanonicalStore

logger = logging.getLogger(__name__)

#: What an execute task whose attempt was handed back fails with (Flower): not an
#: ``ErrorCode``, the call goes on as its next attempt.
HANDED_BACK = "HANDED_BACK"

_lock = threading.Lock()
#: When this process began handing its calls back (monotonic), ``None`` while it is not.
_began: float | None = None
#: Overdue handlers a drain may end early (``drainable``).
_drainable: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
#: ``(identity, attempt)`` of the attempts this process handed back.
_handed: set[tuple[str, int]] = set()


def drainable(handler: Callable[[], Any]) -> Callable[[], Any]:
    """Marks an execute step's overdue handler as one a drain ends early (it checks
    ``draining()`` itself)."""
    _drainable.add(handler)
    return handler


def is_drainable(handler: Callable[..., Any]) -> bool:
    return handler in _drainable


def begin() -> None:
    """This process hands back the calls it still runs (its drain time is over)."""
    global _began
    with _lock:
        if _began is None:
            _began = time.monotonic()


def draining() -> bool:
    return _began is not None


def reset() -> None:
    """Forgets a drain (tests; a process that serves on)."""
    global _began
    with _lock:
        _began = None
        _handed.clear()


def handed_back(key: CanonicalKey, attempt: int) -> bool:
    """True when this process handed attempt ``attempt`` of the call back."""
    with _lock:
        return (key.identity, attempt) in _handed


def hand_back(
    store: CanonicalStore,
    key: CanonicalKey,
    scope: CallScope,
    *,
    send: Callable[[int], None] | None,
    reap_after_s: float,
    reap_grace_s: float,
) -> WriteStatus | None:
    """Gives the running attempt (``scope``) of the call up and sends its next attempt at
    once with ``send(attempt)``: ``None`` when it went (handed back), else why not (the
    call ended, kept a raw response, or another attempt had it already: ``retry_attempt``)."""
    scope.end(Ended.SUPERSEDED)  # the tool's next heartbeat raises CallCancelled
    moved = store.retry_attempt(
        key,
        attempt=scope.attempt,
        reap_after_s=reap_after_s,
        reap_grace_s=reap_grace_s,
        handback=True,
    )
    if isinstance(moved, WriteStatus):
        return moved
    with _lock:
        _handed.add((key.identity, scope.attempt))
    telemetry.record(HANDBACKS, 1, tool=scope.tool_name)
    if send is None:
        logger.error("call %s handed back: attempt %d not sent (no sender)", key.identity, moved)
        return None
    try:
        send(moved)
    except Exception as exc:
        # The record waits for attempt ``moved``: the reaper sends it after its queue wait.
        logger.error(
            "call %s handed back: attempt %d not sent: %s", key.identity, moved, type(exc).__name__
        )
        return None
    logger.warning("call %s handed back by a draining worker: attempt %d sent", key.identity, moved)
    return None
