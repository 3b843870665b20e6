"""Hand-backs: a draining worker gives each call it still runs to another worker.

A worker told to stop (SIGTERM: ``tasks.worker.drain``) lets its running calls finish for
``TOOL_BOUNDARY_WORKER_DRAIN_S``; then it calls ``begin()`` and ends each in-line run still in
progress through the watchdog (``ToolThreads.watchdog.end_now``) as if its time were up. The
execute step's overdue handler asks ``draining()`` first and, while the run still has time,
calls ``hand_back`` instead of timing the call out: the attempt is given up in the store
(fenced, as the lease's expiry would but now: ``retry.lua`` with the counter ``handbacks``,
which the tool's retry policy does not count), the limited tool's slot is released and the
next attempt sent at once (``steps.next_attempt``, the worker's and the reaper's one way),
and the tool is cancelled through its cancellation path (its next heartbeat raises
``CallCancelled``; the pool interrupts or lets go of the run: ``InlineHost.replace``).
Counted: the record's ``handbacks``, the metric ``tool_boundary_handbacks_total{tool}``, and
the execute task fails with the code ``HANDED_BACK`` (Flower).
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
from boundary.steps.attempts import AttemptTerms, next_attempt
from boundary.store.base import WriteStatus
from boundary.telemetry.names import HANDBACKS

if TYPE_CHECKING:
    from boundary.models import CanonicalKey
    from boundary.registry import ToolSpec
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
    spec: ToolSpec | None,
    scope: CallScope,
    terms: AttemptTerms,
) -> WriteStatus | None:
    """Gives the running attempt (``scope``) of the call up and sends its next attempt at
    once (``next_attempt``, on ``terms``: its sender and reap terms): ``None`` when it went
    (handed back), else why not (the call ended, kept a raw response, or another attempt had
    it already: ``retry_attempt``)."""
    scope.end(Ended.SUPERSEDED)  # the tool's next heartbeat raises CallCancelled
    moved = next_attempt(
        store,
        terms.sender or _NO_SENDER,
        key,
        spec,
        attempt=scope.attempt,
        backoff_s=0.0,
        max_pending_s=terms.max_pending_s,
        reap_grace_s=terms.reap_grace_s,
        redispatch=False,
        handback=True,
    )
    if isinstance(moved, WriteStatus):
        return moved
    with _lock:
        _handed.add((key.identity, scope.attempt))
    telemetry.record(HANDBACKS, 1, tool=scope.tool_name)
    if moved is None:
        # The record waits for its next attempt: the reaper sends it after its queue wait.
        logger.error("call %s handed back: its next attempt not sent", key.identity)
        return None
    logger.warning("call %s handed back by a draining worker: attempt %d sent", key.identity, moved)
    return None


class _NoSender:
    """The sender of a process that has none (``AttemptTerms.sender`` is ``None``): the
    attempt moves on in the store all the same, unsent."""

    def send_attempt(
        self, key: CanonicalKey, *, attempt: int, queue: str, countdown_s: float = 0.0
    ) -> None:
        raise LookupError("no sender")


_NO_SENDER = _NoSender()
