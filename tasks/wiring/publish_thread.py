"""``PublishThread``: the async calls' sends, published from one dedicated thread.

Each ``asend`` of an event loop queues a blocking publish; one daemon thread drains the
queue in batches and hands the results back to every waiting loop in one wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable

#: Sends a ``PublishThread`` holds at most; past it a send runs on a default-executor thread
#: of its own, as if there were no publishing thread.
MAX_QUEUED = 10_000
#: Sends published before the thread hands their results back to the waiting loops: a
#: batch's first caller does not wait for a long batch's last publish.
SETTLE_EVERY = 16

#: A send's result: ``None`` when published, else the exception to raise to its caller.
_Done = tuple["asyncio.Future[None]", BaseException | None]


class PublishThread:
    """Publishes sends for event loops from one dedicated daemon thread.

    ``asend(publish)`` queues a blocking ``publish()`` and returns when this thread ran it
    (raising what it raised). One thread drains the queue in batches and hands each batch's
    results back to every waiting loop in one wake-up, instead of one default-executor task
    per send: fewer threads take the GIL from the event loops, and no loop wakes once per
    send. A send queued is published even when its caller stops waiting (a call recorded is
    always sent). The queue is bounded (``MAX_QUEUED``); ``close`` publishes what is queued,
    then stops the thread.
    """

    def __init__(self, name: str = "tb-publisher", max_queued: int = MAX_QUEUED) -> None:
        self._name = name
        self._queue: deque[tuple[Callable[[], None], asyncio.Future[None]]] = deque()
        self._ready = threading.Condition()
        self._room = threading.Semaphore(max_queued)
        self._thread: threading.Thread | None = None
        self._closed = False

    async def asend(self, publish: Callable[[], None]) -> None:
        """Runs ``publish`` on the publishing thread; returns or raises as it did."""
        loop = asyncio.get_running_loop()
        if not self._room.acquire(blocking=False):
            # Full: this send goes on a thread of its own (shielded, as a queued one).
            await asyncio.shield(asyncio.to_thread(publish))
            return
        future: asyncio.Future[None] = loop.create_future()
        with self._ready:
            if self._closed:
                self._room.release()
                raise RuntimeError("the publisher is closed")
            self._queue.append((publish, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._ready.notify()
        # Shielded: the send is published whatever happens to the waiter.
        await asyncio.shield(future)

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return  # closed and drained
                batch = list(self._queue)
                self._queue.clear()
            done: list[_Done] = []
            for publish, future in batch:
                try:
                    publish()
                except BaseException as error:  # handed to the caller, never lost here
                    done.append((future, error))
                else:
                    done.append((future, None))
                finally:
                    self._room.release()
                if len(done) >= SETTLE_EVERY:
                    _settle_all(done)
                    done = []
            _settle_all(done)

    def close(self, timeout: float | None = None) -> None:
        """Publishes what is queued, then ends the thread (waits up to ``timeout``)."""
        with self._ready:
            self._closed = True
            thread = self._thread
            self._ready.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


def _settle_all(done: list[_Done]) -> None:
    """Hands results back: one wake-up per event loop for the whole list."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
    for future, error in done:
        by_loop.setdefault(future.get_loop(), []).append((future, error))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[_Done]) -> None:
    for future, error in settled:
        if future.cancelled():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
