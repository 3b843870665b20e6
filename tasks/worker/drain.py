"""Workers that drain: on SIGTERM a worker stops taking messages at once (Celery's warm
shutdown cancels its consumers), lets its running calls finish for up to
``TOOL_BOUNDARY_WORKER_DRAIN_S``, then hands each unfinished one back to another worker
(``boundary.handback``: attempt given up in the store, slot released, next attempt sent at
once, the tool cancelled through its cancellation path). A second SIGTERM or a SIGINT keeps
Celery's meaning (SIGINT twice or SIGQUIT: cold shutdown).

Where the calls run:

- threads pool (``tasks.worker.pool.InlineThreadPool``): in this process; the drain's timer
  ends its in-line runs through the watchdog, and the pool lets go of their threads (a warm
  shutdown no longer waits for them) and acknowledges their messages;
- prefork pool: in the children; the parent's timer sends each child ``HANDBACK_SIGNAL``,
  whose handler does the same there (the child interrupts the tool, as for an overdue run,
  and the task returns).

Runs handed to a tool thread (the solo pool) are not ended early: they finish, or time out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from typing import Any

from boundary import handback
from boundary.tool_threads import tool_threads
from tasks.runtime import get_runtime

logger = logging.getLogger(__name__)

#: Tells a prefork child to hand its running calls back. SIGURG: ignored by default (a child
#: that never installed the handler is not harmed), used by neither Celery nor billiard.
HANDBACK_SIGNAL = signal.SIGURG

_lock = threading.Lock()
#: The worker (``WorkController``) of this process, kept at ``worker_init``.
_worker: Any = None
#: When the first warm shutdown request came (monotonic), ``None`` before.
_asked_at: float | None = None


def remember_worker(sender: Any = None, **_: Any) -> None:
    """``worker_init``: keeps the worker, whose pool's children the drain signals."""
    global _worker
    _worker = sender


def on_shutting_down(how: str = "", **_: Any) -> None:
    """``worker_shutting_down`` (MainProcess, in the signal handler): the first warm request
    starts the drain's timer; later ones change nothing (Celery's cold shutdown stays cold)."""
    global _asked_at
    if how != "Warm":
        return
    with _lock:
        if _asked_at is not None:
            return
        _asked_at = time.monotonic()
    try:
        drain_s = get_runtime().settings.worker_drain_s
    except Exception:
        drain_s = 20.0
    threading.Thread(
        target=_hand_back_after, args=(drain_s,), name="tool-boundary-drain", daemon=True
    ).start()


def _hand_back_after(drain_s: float) -> None:
    logger.warning(
        "tool-boundary worker: draining; running calls have %.3gs to finish, then are handed back",
        drain_s,
    )
    time.sleep(drain_s)
    for pid in pool_children():
        with contextlib.suppress(OSError):  # gone meanwhile
            os.kill(pid, HANDBACK_SIGNAL)
    hand_back_here()


def pool_children() -> list[int]:
    """The pids of the worker's prefork children (none for another pool)."""
    pool = getattr(getattr(_worker, "pool", None), "_pool", None)
    processes = getattr(pool, "_pool", None) or []
    return [pid for pid in (getattr(p, "pid", None) for p in processes) if pid]


def hand_back_here() -> int:
    """Hands back every call this process still runs in line; how many."""
    handback.begin()
    ended = tool_threads().watchdog.end_now(handback.is_drainable)
    if ended:
        logger.warning("tool-boundary worker: handing %d running call(s) back", ended)
    return ended


def on_child_start(**_: Any) -> None:
    """``worker_process_init``: a prefork child hands its calls back on ``HANDBACK_SIGNAL``."""
    signal.signal(HANDBACK_SIGNAL, _on_signal)


def _on_signal(signum: int, frame: Any) -> None:
    # Not here: the handler runs on the main thread, between two bytecodes of the tool.
    threading.Thread(target=hand_back_here, name="tool-boundary-handback", daemon=True).start()
