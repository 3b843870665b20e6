"""Threads that run tools and projectors under a time limit, in every Celery pool."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from boundary.errors import ToolTimeout

logger = logging.getLogger(__name__)

#: Threads a process may start for tools and projectors; each hung run holds one for good.
#: Keep it above the worker's concurrency: a run waits for a free one otherwise.
DEFAULT_MAX_TOOL_THREADS = 32


class ToolThreadsExhausted(ToolTimeout):
    """Every tool thread of this process is held by a run past its time limit (hung tools):
    the run was not started. The process should stop taking work and be restarted."""


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
    ) -> Any:
        """Runs ``executor(arguments)`` on a tool thread for at most ``timeout_s``.

        With ``max_concurrency``, at most that many runs of ``tool`` hold threads at once in
        this process (a run that overran its limit holds its slot until it returns): a hung
        tool cannot take every thread from the others.

        Raises:
            ToolTimeout: the run did not end in time (or found no slot or thread in time).
            ToolThreadsExhausted: every thread is held by a hung run; this one never started.
        """
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
) -> Any:
    """Runs the tool in a watchdog thread and gives up after ``timeout_s`` (see
    ``ToolThreads.run`` for ``max_concurrency``).

    A Python thread cannot be killed: a tool that overruns keeps running in the background,
    but its output is discarded (the record is sealed TOOL_TIMEOUT first, and a sealed record
    takes no raw response). Works in every Celery pool, unlike signal-based time limits.
    """
    return tool_threads().run(
        spec_executor, arguments, timeout_s, tool=tool, max_concurrency=max_concurrency
    )
