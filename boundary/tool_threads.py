"""Threads that run tools and projectors under a time limit, in every Celery pool."""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any

from boundary.errors import ToolTimeout

#: Threads a process may start for tools and projectors; each hung run holds one for good.
#: Keep it above the worker's concurrency: a run waits for a free one otherwise.
DEFAULT_MAX_TOOL_THREADS = 32


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

    @property
    def started(self) -> int:
        """Threads started (and alive: they never end) so far."""
        return self._started

    def _inbox(self, timeout_s: float) -> queue.SimpleQueue[Any]:
        give_up = time.monotonic() + max(timeout_s, 0.0)
        with self._lock:
            while not self._idle and self._started >= self.max_threads:
                left = give_up - time.monotonic()
                if left <= 0:
                    # Every thread is held by a hung run: this one times out unstarted.
                    raise ToolTimeout()
                self._lock.wait(left)
            if self._idle:
                return self._idle.pop()
            self._started += 1
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(
            target=self._serve, args=(inbox,), name="tool-boundary-tool", daemon=True
        ).start()
        return inbox

    def run(self, executor: Any, arguments: Any, timeout_s: float) -> Any:
        started = time.monotonic()
        inbox = self._inbox(timeout_s)
        outbox: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        inbox.put((executor, arguments, outbox))
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
            executor, arguments, outbox = inbox.get()
            try:
                result: tuple[bool, Any] = (True, executor(arguments))
            except BaseException as exc:
                result = (False, exc)
            outbox.put(result)
            del executor, arguments, outbox, result
            with self._lock:
                self._idle.append(inbox)
                self._lock.notify()


_threads_lock = threading.Lock()
_threads: tuple[int, ToolThreads] | None = None
_max_tool_threads = DEFAULT_MAX_TOOL_THREADS


def tool_threads() -> ToolThreads:
    """The process's tool threads; made anew in a forked child (prefork pool), where the
    parent's threads do not exist."""
    global _threads
    pid = os.getpid()
    with _threads_lock:
        if _threads is None or _threads[0] != pid:
            _threads = (pid, ToolThreads(_max_tool_threads))
        return _threads[1]


def limit_tool_threads(max_threads: int) -> None:
    """Caps the threads this process starts for tools and projectors (a worker sets it from
    ``TOOL_BOUNDARY_MAX_TOOL_THREADS`` at start)."""
    global _max_tool_threads
    if max_threads < 1:
        raise ValueError("max_threads must be >= 1")
    _max_tool_threads = max_threads
    tool_threads().max_threads = max_threads


def run_bounded(spec_executor: Any, arguments: Any, timeout_s: float) -> Any:
    """Runs the tool in a watchdog thread and gives up after ``timeout_s``.

    A Python thread cannot be killed: a tool that overruns keeps running in the background,
    but its output is discarded (the record is sealed TOOL_TIMEOUT first, and a sealed record
    takes no raw response). Works in every Celery pool, unlike signal-based time limits.
    """
    return tool_threads().run(spec_executor, arguments, timeout_s)
