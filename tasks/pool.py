"""The threads pool a worker runs when started with ``-P threads``: each call's tool and
projector run on the task's own thread, under the process's watchdog (``boundary.tool_threads``).

Celery's threads pool (``celery.concurrency.thread``) hands each task to a
``ThreadPoolExecutor`` of ``concurrency`` threads. Two things stop a tool from running in line
there: a hung tool would hold one of those threads (a worker slot) for good, and the executor's
threads are joined at a warm shutdown and at interpreter exit, so a hung tool would keep the
worker from ever exiting. This pool differs in those two points only:

- its threads are daemon threads; a warm shutdown waits for the tasks that run, except the
  runs the watchdog already ended (their threads are left behind, as tool threads were);
- when the watchdog ends an overdue run it calls ``replace()`` on the run's thread: the pool
  starts one more thread, and raises the consumer's prefetch count by the same step Celery's
  autoscaler uses when it grows a pool (``Consumer._update_prefetch_count``). With late acks
  the overdue task's message stays unacknowledged (it is acked when the task returns), and
  unacknowledged messages count against the prefetch count (kombu's virtual transports count
  delivered minus acked in ``QoS.can_consume``; AMQP's ``basic.qos`` does the same on the
  broker): without the raise, the consumer would hand the new thread no message. The consumer
  applies the new count at its next loop turn (``qos.prev != qos.value``). When the overdue
  run comes back, its thread retires (``retire()``) and the count is lowered again.

How many runs may be overdue at once is bounded by ``TOOL_BOUNDARY_MAX_TOOL_THREADS`` (as tool
threads were): past it a run does not start, its call is sent again, and the worker stops
taking work (``tasks.calls._stop_taking_work``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from celery.concurrency.base import BasePool, apply_target
from celery.concurrency.thread import ApplyResult

from boundary.tool_threads import run_inline_here

logger = logging.getLogger(__name__)

_STOP = None


class _Thread:
    """One pool thread and its state; the ``InlineHost`` of the runs on it."""

    def __init__(self, pool: InlineThreadPool) -> None:
        self.pool = pool
        #: Its run is past its deadline (the watchdog replaced it).
        self.replaced = False
        #: Stops after its current task.
        self.retiring = False
        self.thread = threading.Thread(
            target=pool._serve, args=(self,), name="tool-boundary-pool", daemon=True
        )

    def replace(self) -> None:
        self.pool._replace(self)

    def retire(self) -> None:
        self.retiring = True


class InlineThreadPool(BasePool):  # type: ignore[misc]
    """Celery's threads pool with replaceable daemon threads (see the module)."""

    body_can_be_buffer = True
    signal_safe = False
    #: The worker this pool serves (set on a subclass made per worker, ``for_worker``).
    worker: Any = None

    @classmethod
    def for_worker(cls, worker: Any) -> type[InlineThreadPool]:
        """This pool class bound to ``worker`` (whose consumer's prefetch it adjusts)."""
        return type(cls.__name__, (cls,), {"worker": worker})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._threads: set[_Thread] = set()
        #: Threads started in place of overdue runs that have not come back.
        self.replacements = 0
        self._stopping = False

    @property
    def num_processes(self) -> int:
        return int(self.limit) + self.replacements

    def on_start(self) -> None:
        with self._lock:
            for _ in range(self.limit):
                self._start()

    def _start(self) -> None:
        thread = _Thread(self)
        self._threads.add(thread)
        thread.thread.start()

    def on_apply(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        callback: Callable[..., Any] | None = None,
        accept_callback: Callable[..., Any] | None = None,
        **_: Any,
    ) -> ApplyResult:
        future: Future[Any] = Future()
        self._work.put((future, target, args, kwargs, callback, accept_callback))
        return ApplyResult(future)

    def _serve(self, me: _Thread) -> None:
        run_inline_here(me)
        try:
            while not me.retiring:
                item = self._work.get()
                if item is _STOP:
                    return
                future, target, args, kwargs, callback, accept_callback = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(apply_target(target, args, kwargs, callback, accept_callback))
                except BaseException as exc:
                    future.set_exception(exc)
                del item, future, target, args, kwargs, callback, accept_callback
        finally:
            self._gone(me)

    def _replace(self, thread: _Thread) -> None:
        """The run on ``thread`` is overdue: one more thread, one more message prefetched."""
        with self._lock:
            if thread.replaced:
                return
            thread.replaced = True
            self._lock.notify_all()  # a warm shutdown no longer waits for it
            if self._stopping:
                return
            self.replacements += 1
            self._start()
        self._prefetch_changed(+1)
        logger.warning(
            "tool-boundary: a run past its time limit holds a pool thread; %d thread(s) "
            "started in place of such runs",
            self.replacements,
        )

    def _gone(self, thread: _Thread) -> None:
        with self._lock:
            self._threads.discard(thread)
            back = thread.replaced and not self._stopping
            if back:
                self.replacements -= 1
            self._lock.notify_all()
        if back:
            self._prefetch_changed(-1)

    def _prefetch_changed(self, step: int) -> None:
        consumer = getattr(self.worker, "consumer", None)
        if consumer is None:
            return
        try:
            consumer._update_prefetch_count(step)
        except Exception as exc:
            logger.error("prefetch count not changed: %s", type(exc).__name__)

    def on_stop(self) -> None:
        """Warm shutdown: tasks not started are dropped (their messages, unacknowledged, go
        back to the broker), the running ones finish; runs already overdue are not waited
        for (their daemon threads end with the process)."""
        with self._lock:
            self._stopping = True
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                item[0].cancel()
        with self._lock:
            serving = [t for t in self._threads if not t.replaced]
            for _ in serving:
                self._work.put(_STOP)
            self._lock.wait_for(lambda: all(t.replaced for t in self._threads))
        super().on_stop()

    def on_terminate(self) -> None:
        with self._lock:
            self._stopping = True

    def _get_info(self) -> dict[str, Any]:
        info: dict[str, Any] = super()._get_info()
        info.update({"max-concurrency": self.limit, "threads": len(self._threads)})
        return info
