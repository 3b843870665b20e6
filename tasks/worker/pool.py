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
  starts one more thread, and acknowledges the overdue task's message at once. With late acks
  that message would stay unacknowledged until the tool returns, and unacknowledged messages
  count against the consumer's prefetch count (kombu's virtual transports, Redis included,
  count delivered minus acked in ``QoS.can_consume``; AMQP's ``basic.qos`` does the same on
  the broker): the consumer would hand the new thread no message. The early ack loses
  nothing late acks protect: the call is already sealed, or handed to its next attempt, so a
  redelivery would find nothing to do. It also keeps a hung tool's message from coming back
  after Redis's visibility timeout, and from tripping RabbitMQ's ``consumer_timeout`` (which
  closes the channel, and sends back every unacknowledged message on it). The ack is the
  task's own ``Request.acknowledge()`` (Celery passes the request's bound ``on_success`` as
  the pool callback; Celery's threads pool acks from its pool threads the same way), a no-op
  when the task returns later. A task whose request cannot be found so (none of ours) gets
  the consumer's prefetch count raised by one instead, as Celery's autoscaler does when it
  grows a pool (``Consumer._update_prefetch_count``), lowered again when it comes back. When
  the overdue run comes back, its thread retires (``retire()``).

How many runs may be overdue at once is bounded by ``TOOL_BOUNDARY_MAX_TOOL_THREADS`` (as tool
threads were): past it a run does not start, its call is sent again, and the worker stops
taking work (``tasks.worker.pool_hooks.stop_taking_work``).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from celery.concurrency.base import BasePool, apply_target
from celery.concurrency.thread import ApplyResult
from celery.exceptions import SoftTimeLimitExceeded

from boundary.tool_threads import in_inline_run, run_inline_here

logger = logging.getLogger(__name__)

_STOP = None
#: Seconds a run handed back during a warm shutdown may take to come back before the pool
#: lets go of its thread (a tool that heartbeats stops at its next heartbeat).
HANDBACK_GRACE_S = 2.0


class _Thread:
    """One pool thread and its state; the ``InlineHost`` of the runs on it."""

    def __init__(self, pool: InlineThreadPool) -> None:
        self.pool = pool
        #: Its run is past its deadline (the watchdog replaced it).
        self.replaced = False
        #: Stops after its current task.
        self.retiring = False
        #: The Celery request of the task it runs (``None`` between tasks).
        self.request: Any = None
        #: The consumer's prefetch count was raised for it (its request could not be acked).
        self.raised_prefetch = False
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
                me.request = getattr(callback, "__self__", None)
                settle_once(me.request)
                try:
                    future.set_result(apply_target(target, args, kwargs, callback, accept_callback))
                except BaseException as exc:
                    future.set_exception(exc)
                me.request = None
                del item, future, target, args, kwargs, callback, accept_callback
        finally:
            self._gone(me)

    def _replace(self, thread: _Thread) -> None:
        """The run on ``thread`` is overdue: one more thread, one more message prefetched."""
        with self._lock:
            stopping = self._stopping
        if stopping:
            # A draining worker's hand-back (``tasks.worker.drain``): the tool is told at its
            # next heartbeat; it gets a moment to come back (and clean up) before the warm
            # shutdown stops waiting for it.
            give_up = time.monotonic() + HANDBACK_GRACE_S
            while thread.request is not None and time.monotonic() < give_up:
                time.sleep(0.05)
        with self._lock:
            if thread.replaced:
                return
            thread.replaced = True
            self._lock.notify_all()  # a warm shutdown no longer waits for it
            stopping = self._stopping
            if not stopping:
                self.replacements += 1
                self._start()
        if stopping:
            # A draining worker's hand-back (``tasks.worker.drain``), or a run overdue during a
            # warm shutdown: its call went on without it, so its message is done (else it
            # would come back from the broker as a stale attempt).
            _ack_early(thread.request)
            return
        if not _ack_early(thread.request):
            thread.raised_prefetch = True
            self._prefetch_changed(+1)
        logger.warning(
            "tool-boundary: a run past its time limit holds a pool thread; %d thread(s) "
            "started in place of such runs",
            self.replacements,
        )

    def _gone(self, thread: _Thread) -> None:
        with self._lock:
            self._threads.discard(thread)
            back = thread.raised_prefetch and not self._stopping
            if back:
                self.replacements -= 1
            self._lock.notify_all()
        if back:
            self._prefetch_changed(-1)

    def _prefetch_changed(self, step: int) -> None:
        """Raises or lowers the consumer's prefetch count by ``step`` pool threads."""
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


class _Settled:
    """What a request's ack and reject callbacks share: the first one that runs."""

    __slots__ = ("done", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = False

    def first(self) -> bool:
        with self.lock:
            if self.done:
                return False
            self.done = True
            return True


class _Once:
    """A request's ``_on_ack`` or ``_on_reject``, run only if neither ran before."""

    __slots__ = ("callback", "settled")

    def __init__(self, callback: Callable[..., Any], settled: _Settled) -> None:
        self.callback = callback
        self.settled = settled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.settled.first():
            return self.callback(*args, **kwargs)
        return None


def settle_once(request: Any) -> None:
    """Makes the request's message acknowledged or rejected at most once.

    An overdue run's message is acknowledged early from the watchdog's thread
    (``_ack_early``) while the task, on its own thread, may be returning and acknowledging
    it too. Both go through Celery's ``Request.acknowledge()``, whose check of
    ``acknowledged`` is not atomic: both passed it, the consumer's loop acked the message
    twice, and the second raised ``MessageStateError('Message already acknowledged')`` out of
    the loop: "Unrecoverable error", the worker stopped consuming (the test suite's worker;
    every later call stayed ``PROJECTING``). Here the request's ack and reject callbacks
    share one flag: the first to run wins, the other does nothing."""
    if request is None:
        return
    on_ack = getattr(request, "_on_ack", None)
    on_reject = getattr(request, "_on_reject", None)
    if not callable(on_ack) or isinstance(on_ack, _Once):
        return
    settled = _Settled()
    try:
        request._on_ack = _Once(on_ack, settled)
        if callable(on_reject):
            request._on_reject = _Once(on_reject, settled)
    except AttributeError:
        return  # not Celery's request: nothing to guard


def _ack_early(request: Any) -> bool:
    """Acknowledges an overdue late-ack task's message now (see the module); ``False`` when
    that is not possible here."""
    if request is None or not callable(getattr(request, "acknowledge", None)):
        return False
    task = getattr(request, "task", None)
    if not getattr(task, "acks_late", False):
        return True  # acknowledged when it started: it holds no prefetch slot
    try:
        request.acknowledge()
    except Exception as exc:
        logger.error("overdue task's message not acknowledged: %s", type(exc).__name__)
        return False
    return True


#: Seconds an overdue in-line run of a prefork child has, once interrupted, to come back
#: before the child exits (its parent starts a fresh one).
CHILD_EXIT_GRACE_S = 2.0
#: Exit status of a child that ends so (the parent logs it, and sends the task again).
CHILD_EXIT_STATUS = 70
#: The signal that interrupts an overdue run on the child's main thread (process-directed:
#: Python runs its handler on the main thread, and it ends a sleep or a socket wait).
INTERRUPT_SIGNAL = signal.SIGUSR2


class ChildHost:
    """The ``InlineHost`` of a prefork child's main thread, where its tasks run: tools and
    projectors run in line there under the watchdog (``boundary.tool_threads``), with no
    hand-off to a tool thread per call.

    A run past its deadline has its call ended by the watchdog (sealed, or handed to its next
    attempt), then ``replace()`` interrupts it: the child sends itself ``INTERRUPT_SIGNAL``,
    whose handler raises Celery's ``SoftTimeLimitExceeded`` in the tool, only while the
    main thread is inside an in-line run (never in Celery's or our own code around it). The run
    comes back (``retire()``), its result is dropped, and the child takes its next task. A
    tool that does not come back within ``CHILD_EXIT_GRACE_S`` (stuck in C code, or one that
    swallows the exception and goes on) ends the child: billiard starts a fresh one, and the
    task, sent again as a lost worker's, finds its call already ended.
    """

    def __init__(self) -> None:
        self._back = threading.Event()
        signal.signal(INTERRUPT_SIGNAL, self._interrupt)

    def replace(self) -> None:
        """On the watchdog's thread, once the overdue run's call was ended."""
        self._back.clear()
        os.kill(os.getpid(), INTERRUPT_SIGNAL)
        if not self._back.wait(CHILD_EXIT_GRACE_S):
            logger.critical(
                "tool-boundary: an overdue tool did not stop within %.0fs of its interruption; "
                "this pool process exits and its parent starts a fresh one",
                CHILD_EXIT_GRACE_S,
            )
            os._exit(CHILD_EXIT_STATUS)

    def retire(self) -> None:
        """On the main thread: the overdue run came back; the child serves on."""
        self._back.set()

    @staticmethod
    def _interrupt(signum: int, frame: Any) -> None:
        if in_inline_run():
            raise SoftTimeLimitExceeded("the tool ran past its time limit")
