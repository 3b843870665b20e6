"""Time limits for tools and projectors: a hand-off to a tool thread (every Celery pool), or
an in-line run on a pool thread the pool can replace, under the process's watchdog.

In line (a worker's threads pool, ``tasks.worker.pool``): the tool runs on the task's own
thread; one watchdog thread per process holds each run's deadline. At a run's deadline the
watchdog calls the run's ``on_overdue`` (on a thread of its own: it writes to the store) -- the
execute step seals the call TOOL_TIMEOUT there, on time, while the tool may still run -- and
asks the thread's host (the pool) to run one more thread in its place, so a hung tool costs a
thread but not a worker slot. When the overdue run comes back, its thread retires. At most
``max_threads`` runs may be overdue at once (the bound the tool threads have): past it a run
does not start (``ToolThreadsExhausted``) and the process is asked to stop taking work.
"""

from __future__ import annotations

import contextvars
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from boundary.errors import ToolTimeout

logger = logging.getLogger(__name__)

#: Threads a process may start for tools and projectors; each hung run holds one for good.
#: Keep it above the worker's concurrency: a run waits for a free one otherwise.
DEFAULT_MAX_TOOL_THREADS = 32


class ToolThreadsExhausted(ToolTimeout):
    """Every tool thread of this process is held by a run past its time limit (hung tools):
    the run was not started. The process should stop taking work and be restarted."""


class ToolOverdue(ToolTimeout):
    """An in-line run came back after its deadline: the watchdog already ended the call.

    Attributes:
        outcome: what the run's ``on_overdue`` returned on the watchdog's side (``None`` if it
            raised: the caller then ends the call itself).
    """

    def __init__(self, outcome: Any) -> None:
        super().__init__()
        self.outcome = outcome


class InlineHost(Protocol):
    """The pool that owns a thread allowed to run tools in line (``tasks.worker.pool``)."""

    def replace(self) -> None:
        """The run on this thread is overdue: start one more thread in its place (called
        once per overdue run, from a watchdog thread)."""

    def retire(self) -> None:
        """The overdue run came back: this thread stops after its current task (called on
        the thread itself)."""


_here = threading.local()


def run_inline_here(host: InlineHost | None) -> None:
    """Marks the calling thread as one whose runs go in line, watched by the watchdog, with
    ``host`` replacing it when a run is overdue (``None``: hand-offs again)."""
    _here.host = host


def in_inline_run() -> bool:
    """True while the calling thread runs a tool or projector in line (for a host that
    interrupts an overdue run: nothing else on that thread is interrupted)."""
    return bool(getattr(_here, "in_run", False))


def inline_host() -> InlineHost | None:
    """The calling thread's host if its runs go in line."""
    host: InlineHost | None = getattr(_here, "host", None)
    return host


class _Watch:
    """One in-line run under the watchdog."""

    __slots__ = ("context", "due", "host", "on_overdue", "outcome", "settled")

    def __init__(self, due: float, on_overdue: Callable[[], Any], host: InlineHost) -> None:
        self.due = due
        self.on_overdue = on_overdue
        #: The run's context (its trace, its call), for ``on_overdue`` on the watchdog's side:
        #: a retry sent from there stays in the caller's trace.
        self.context = contextvars.copy_context()
        self.host = host
        self.outcome: Any = None
        #: Made when the run is found overdue (set once its ``on_overdue`` returned).
        self.settled: threading.Event | None = None


class Watchdog:
    """One daemon thread that ends in-line runs at their deadlines.

    Runs in progress are kept in a dict (at most one per pool thread); the thread sleeps until
    the earliest deadline and is woken only by a run due before it, so an ordinary call costs
    a dict insert and delete under a lock, not a context switch. An overdue run is handled on
    a fresh thread (it writes to the store), so one slow store write delays no other deadline.
    """

    def __init__(self, on_overdue: Callable[[_Watch], None]) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._runs: dict[int, _Watch] = {}
        self._wakes_at = float("inf")
        #: The deadline of the run that started last (monotonic clock).
        self._last_due = 0.0
        self._thread: threading.Thread | None = None
        self._handle = on_overdue
        #: Times the thread woke (for tests: a run that ends in time must not wake it).
        self.wakes = 0

    def watch(self, due: float, on_overdue: Callable[[], Any], host: InlineHost) -> _Watch:
        run = _Watch(due, on_overdue, host)
        with self._cond:
            self._runs[id(run)] = run
            self._last_due = due
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="tool-boundary-watchdog", daemon=True
                )
                self._thread.start()
            elif due < self._wakes_at:
                self._cond.notify()
        return run

    def end_now(self, which: Callable[[Callable[[], Any]], bool]) -> int:
        """Makes the runs whose ``on_overdue`` ``which`` picks due now: the watchdog ends them
        as overdue runs (a draining worker's hand-back, ``boundary.handback``). Returns how
        many."""
        with self._cond:
            picked = [run for run in self._runs.values() if which(run.on_overdue)]
            for run in picked:
                run.due = float("-inf")
            if picked and self._thread is not None:
                self._cond.notify()
        return len(picked)

    def finish(self, run: _Watch) -> threading.Event | None:
        """The run came back: ``None`` if in time, else the event set once the watchdog's
        handling of it is done."""
        with self._cond:
            self._runs.pop(id(run), None)
            return run.settled

    def _loop(self) -> None:
        while True:
            due: list[_Watch] = []
            with self._cond:
                while not due:
                    self.wakes += 1
                    now = time.monotonic()
                    due = [run for run in self._runs.values() if run.due <= now]
                    if due:
                        break
                    # With no run in progress it sleeps until the last run's deadline while
                    # that is still ahead. Woken by a run that has already ended (a quick run;
                    # the store's round trips come between runs), a minute's sleep would have
                    # the next run, due before that, wake it again: once per call. Runs of one
                    # limit wake it about once per limit instead.
                    last = self._last_due
                    idle = last if last > now else now + 60
                    self._wakes_at = min((r.due for r in self._runs.values()), default=idle)
                    self._cond.wait(self._wakes_at - now)
                for run in due:
                    run.settled = threading.Event()
                    del self._runs[id(run)]
            for run in due:
                threading.Thread(
                    target=self._handle, args=(run,), name="tool-boundary-overdue", daemon=True
                ).start()


class ToolThreads:
    """Daemon threads that run tools (and projectors), kept and reused once idle.

    Starting a thread per tool run cost about 150 µs on a loaded 2-core machine (a fifth of the
    execute step's time); handing the run to an idle thread costs a queue put. A tool that
    overruns keeps its thread until it returns, so a new thread is started whenever none is
    idle, up to ``max_threads``: past that (that many tools hung at once), a run waits for a
    thread to come free within its own time limit, and times out otherwise, so hung tools cost
    a bounded number of threads. Daemon threads, so a hung tool never holds up a worker's exit
    (``ThreadPoolExecutor`` joins its threads at exit).
    """

    def __init__(self, max_threads: int = DEFAULT_MAX_TOOL_THREADS) -> None:
        self.max_threads = max_threads
        self._lock = threading.Condition()
        self._idle: list[queue.SimpleQueue[Any]] = []
        self._started = 0
        #: Each busy thread's inbox (by id) -> the monotonic time its run is due to end.
        self._busy: dict[int, float] = {}
        #: Runs in progress (hung ones included) per tool that has a concurrency bound.
        self._held: dict[str, int] = {}
        #: Called once when every thread is found held by an overdue run.
        self.on_exhausted: Callable[[int], None] | None = None
        self._exhausted = False
        #: In-line runs past their deadline that have not come back.
        self._overdue = 0
        self.watchdog = Watchdog(self._end_overdue)

    @property
    def started(self) -> int:
        """Threads started (and alive: they never end) so far."""
        return self._started

    def _all_hung(self) -> bool:
        """Every thread is started and held by a run past its end (called under the lock)."""
        now = time.monotonic()
        return (
            self._started >= self.max_threads
            and not self._idle
            and all(ends < now for ends in self._busy.values())
        )

    def _note_exhausted(self) -> None:
        """Every thread is held by a hung run: said once, and the hook asks the process to
        stop taking work (called under the lock)."""
        if self._exhausted:
            return
        self._exhausted = True
        logger.critical(
            "tool-boundary: all %d tool threads are held by hung tools; this process stops "
            "taking work so its supervisor can restart it",
            self.max_threads,
        )
        if self.on_exhausted is not None:
            self.on_exhausted(self.max_threads)

    def _take_slot(self, tool: str, limit: int, give_up: float) -> None:
        """Waits (under the lock) for one of ``tool``'s ``limit`` run slots."""
        while self._held.get(tool, 0) >= limit:
            left = give_up - time.monotonic()
            if left <= 0:
                raise ToolTimeout()  # the tool's own runs hold every slot
            self._lock.wait(left)
        self._held[tool] = self._held.get(tool, 0) + 1

    def _inbox(self, timeout_s: float, tool: str | None, limit: int | None) -> Any:
        give_up = time.monotonic() + max(timeout_s, 0.0)
        with self._lock:
            if limit is not None and tool is not None:
                self._take_slot(tool, limit, give_up)
            try:
                hung = False
                while not self._idle and self._started >= self.max_threads:
                    hung = self._all_hung()
                    if hung:
                        self._note_exhausted()
                    left = give_up - time.monotonic()
                    if left <= 0:
                        # No thread came free in this run's whole limit: it never started.
                        raise ToolThreadsExhausted() if hung else ToolTimeout()
                    self._lock.wait(min(left, 1.0))
            except BaseException:
                if limit is not None and tool is not None:
                    self._held[tool] -= 1
                raise
            if self._idle:
                inbox = self._idle.pop()
            else:
                self._started += 1
                inbox = queue.SimpleQueue()
                threading.Thread(
                    target=self._serve, args=(inbox,), name="tool-boundary-tool", daemon=True
                ).start()
            self._busy[id(inbox)] = give_up
        return inbox

    def run(
        self,
        executor: Any,
        arguments: Any,
        timeout_s: float,
        *,
        tool: str | None = None,
        max_concurrency: int | None = None,
        on_overdue: Callable[[], Any] | None = None,
    ) -> Any:
        """Runs ``executor(arguments)`` for at most ``timeout_s``: on a tool thread, or in
        line when the calling thread allows it (``run_inline_here``) and ``on_overdue`` says
        how the watchdog ends the call at its deadline.

        With ``max_concurrency``, at most that many runs of ``tool`` hold threads at once in
        this process (a run that overran its limit holds its slot until it returns): a hung
        tool cannot take every thread from the others.

        Raises:
            ToolTimeout: the run did not end in time (or found no slot or thread in time).
            ToolOverdue: an in-line run came back after the watchdog ended its call.
            ToolThreadsExhausted: every thread is held by a hung run; this one never started.
        """
        host = inline_host()
        if host is not None and on_overdue is not None:
            return self._run_inline(
                host,
                executor,
                arguments,
                timeout_s,
                tool=tool,
                limit=max_concurrency,
                on_overdue=on_overdue,
            )
        started = time.monotonic()
        inbox = self._inbox(timeout_s, tool, max_concurrency)
        outbox: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        slot = tool if max_concurrency is not None else None
        inbox.put((executor, arguments, outbox, slot))
        try:
            ok, value = outbox.get(timeout=max(timeout_s - (time.monotonic() - started), 0.0))
        except queue.Empty:
            raise ToolTimeout() from None
        if ok:
            return value
        if not isinstance(value, Exception):
            # SystemExit or KeyboardInterrupt raised by the tool in its own thread ends no
            # process: it is the tool failing, and must not tear down the caller (nor leave
            # the record PROJECTING).
            raise RuntimeError("the tool raised a BaseException") from None
        raise value

    def _run_inline(
        self,
        host: InlineHost,
        executor: Any,
        arguments: Any,
        timeout_s: float,
        *,
        tool: str | None,
        limit: int | None,
        on_overdue: Callable[[], Any],
    ) -> Any:
        due = time.monotonic() + max(timeout_s, 0.0)
        slot = tool if limit is not None else None
        if slot is not None or self._overdue >= self.max_threads:
            with self._lock:
                if slot is not None and limit is not None:
                    self._take_slot(slot, limit, due)
                if self._overdue >= self.max_threads:
                    # As many runs are overdue as a process may hold: this one never starts.
                    if slot is not None:
                        self._held[slot] -= 1
                        self._lock.notify_all()
                    self._note_exhausted()
                    raise ToolThreadsExhausted()
        run = self.watchdog.watch(due, on_overdue, host)
        try:
            _here.in_run = True
            result: tuple[bool, Any] = (True, executor(arguments))
        except BaseException as exc:
            result = (False, exc)
        finally:
            _here.in_run = False
            if slot is not None:
                with self._lock:
                    self._held[slot] -= 1
                    self._lock.notify_all()
        settled = self.watchdog.finish(run)
        if settled is not None:
            # Overdue: the watchdog ended the call (and replaced this thread): whatever the
            # tool returned is dropped, and this thread retires.
            settled.wait()
            with self._lock:
                self._overdue -= 1
            host.retire()
            raise ToolOverdue(run.outcome)
        ok, value = result
        if ok:
            return value
        if not isinstance(value, Exception):
            raise RuntimeError("the tool raised a BaseException") from None
        raise value

    def _end_overdue(self, run: _Watch) -> None:
        """On a thread of its own: ends the overdue run's call, then replaces its thread."""
        with self._lock:
            self._overdue += 1
        try:
            run.outcome = run.context.run(run.on_overdue)
        except Exception as exc:
            # The run's step ends the call itself when it comes back (the reaper if never).
            logger.error("overdue run not ended by the watchdog: %s", type(exc).__name__)
        finally:
            assert run.settled is not None  # made when it was found overdue
            run.settled.set()
        try:
            run.host.replace()
        except Exception as exc:
            logger.error("overdue run's thread not replaced: %s", type(exc).__name__)

    @property
    def overdue(self) -> int:
        """In-line runs past their deadline that have not come back."""
        return self._overdue

    def _serve(self, inbox: queue.SimpleQueue[Any]) -> None:
        while True:
            executor, arguments, outbox, slot = inbox.get()
            try:
                result: tuple[bool, Any] = (True, executor(arguments))
            except BaseException as exc:
                result = (False, exc)
            outbox.put(result)
            del executor, arguments, outbox, result
            with self._lock:
                self._busy.pop(id(inbox), None)
                if slot is not None:
                    self._held[slot] -= 1
                self._idle.append(inbox)
                self._lock.notify_all()


_threads_lock = threading.Lock()
_threads: tuple[int, ToolThreads] | None = None
_max_tool_threads = DEFAULT_MAX_TOOL_THREADS
_on_exhausted: Callable[[int], None] | None = None


def tool_threads() -> ToolThreads:
    """The process's tool threads; made anew in a forked child (prefork pool), where the
    parent's threads do not exist."""
    global _threads
    pid = os.getpid()
    with _threads_lock:
        if _threads is None or _threads[0] != pid:
            _threads = (pid, ToolThreads(_max_tool_threads))
            _threads[1].on_exhausted = _on_exhausted
        return _threads[1]


def on_tool_threads_exhausted(callback: Callable[[int], None] | None) -> None:
    """Calls ``callback(max_threads)`` once per process when every tool thread is held by a
    hung run (a worker uses it to stop taking work and exit for its supervisor)."""
    global _on_exhausted
    _on_exhausted = callback
    tool_threads().on_exhausted = callback


def limit_tool_threads(max_threads: int) -> None:
    """Caps the threads this process starts for tools and projectors (a worker sets it from
    ``TOOL_BOUNDARY_MAX_TOOL_THREADS`` at start)."""
    global _max_tool_threads
    if max_threads < 1:
        raise ValueError("max_threads must be >= 1")
    _max_tool_threads = max_threads
    tool_threads().max_threads = max_threads


def run_bounded(
    spec_executor: Any,
    arguments: Any,
    timeout_s: float,
    *,
    tool: str | None = None,
    max_concurrency: int | None = None,
    on_overdue: Callable[[], Any] | None = None,
) -> Any:
    """Runs the tool under a time limit of ``timeout_s`` (see ``ToolThreads.run`` for
    ``max_concurrency``, and for ``on_overdue``, which lets it run in line).

    A Python thread cannot be killed: a tool that overruns keeps running in the background,
    but its output is discarded (the record is sealed TOOL_TIMEOUT first, and a sealed record
    takes no raw response). Works in every Celery pool, unlike signal-based time limits.
    """
    return tool_threads().run(
        spec_executor,
        arguments,
        timeout_s,
        tool=tool,
        max_concurrency=max_concurrency,
        on_overdue=on_overdue,
    )
