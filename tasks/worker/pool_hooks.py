"""The worker's pool, as the worker starts and in its processes: a threads pool runs each
tool in line on its task's thread (``InlineThreadPool``), a prefork child on its main thread
(``ChildHost``), and a process whose every tool thread a hung tool holds stops taking work.
Connected to Celery's signals in ``tasks.worker.signals``."""

from __future__ import annotations

import os
import signal
from typing import Any

from billiard.process import current_process
from celery import signals
from celery.concurrency import get_implementation
from celery.concurrency.thread import TaskPool as CeleryThreadPool

from boundary.steps import limit_tool_threads
from boundary.tool_threads import on_tool_threads_exhausted, run_inline_here
from tasks.runtime import get_runtime
from tasks.worker.pool import ChildHost, InlineThreadPool

#: Set in a prefork pool's child processes.
_in_pool_child = False


def run_tools_in_line(sender: Any = None, **_: Any) -> None:
    """``worker_init``: a worker on Celery's threads pool gets ``InlineThreadPool`` instead:
    the same pool with the tool and projector on the task's own thread under a watchdog,
    rather than a hand-off to a tool thread per step. (``worker_init`` fires before the
    worker resolves its pool class.)"""
    pool = getattr(sender, "pool_cls", None)
    if pool is None:
        return
    try:
        resolved = get_implementation(pool)
    except Exception:
        return  # Celery reports an unknown pool itself
    if resolved is CeleryThreadPool:
        sender.pool_cls = InlineThreadPool.for_worker(sender)


def limit_tool_threads_at_start(**_: Any) -> None:
    """``worker_init``, after the start-up check: at most ``max_tool_threads`` runs may be
    overdue at once; past it the process stops taking work (``stop_taking_work``)."""
    limit_tool_threads(get_runtime().settings.max_tool_threads)
    on_tool_threads_exhausted(stop_taking_work)


def mark_pool_child(**_: Any) -> None:
    """``worker_process_init``: a prefork child runs its tools in line on its main thread
    (``ChildHost``). The solo pool sends this signal too, in the worker's own main process:
    not a child, so it keeps handing its tools to tool threads (an overdue run there cannot
    end a process)."""
    global _in_pool_child
    if current_process().name == "MainProcess":
        return
    _in_pool_child = True
    run_inline_here(ChildHost())


def stop_taking_work(max_threads: int) -> None:
    """Every tool thread is held by a hung tool (logged once by the tool threads): a prefork
    child ends so its parent starts a fresh one; any other pool's worker shuts down warmly
    (its running tasks end within their time limits) for its supervisor to restart it."""
    if _in_pool_child:
        # After the current task returns: the parent replaces the child (the one hook
        # connected later than ``tasks.worker.signals``, and only in such a child).
        signals.task_postrun.connect(_exit_child, weak=False)
        return
    os.kill(os.getpid(), signal.SIGTERM)


def _exit_child(**_: Any) -> None:
    os._exit(0)
