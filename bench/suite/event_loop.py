"""Measuring an asyncio event loop from the inside: how late a ticker wakes up, and how long
each callback holds the loop. Standard library only: the async tests import it too."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager


async def ticker(
    stop: asyncio.Event, period_s: float, late: list[float], cpu: list[float] | None = None
) -> None:
    """Sleeps ``period_s`` again and again until ``stop`` is set, noting how late each wake-up
    is (wall time) in ``late`` and, given ``cpu``, the CPU time the loop's thread spent over
    each tick (all the steps run between two ticks)."""
    while not stop.is_set():
        began, began_cpu = time.perf_counter(), time.thread_time()
        await asyncio.sleep(period_s)
        late.append(time.perf_counter() - began - period_s)
        if cpu is not None:
            cpu.append(time.thread_time() - began_cpu)


@contextmanager
def step_cpu_times() -> Iterator[list[float]]:
    """The CPU time of every callback the event loop runs (each step of each task): how long
    code holds the loop between two awaits. CPU time of the loop's thread, so a step that is
    descheduled by the OS or waits for the GIL does not count as busy.

    The objects made before are frozen out of the garbage collector's way meanwhile: a full
    collection over a process's objects (a test process holds pytest's, Celery's and every
    earlier test's; ~80 ms) would show up as a stall of whatever step triggered it, and what
    is measured is the code under test's own work."""
    gc.collect()
    gc.freeze()
    steps: list[float] = []
    original = asyncio.events.Handle._run

    def timed(handle: asyncio.events.Handle) -> None:
        cpu = time.thread_time()
        try:
            original(handle)
        finally:
            steps.append(time.thread_time() - cpu)

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]
    try:
        yield steps
    finally:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]
        gc.unfreeze()
