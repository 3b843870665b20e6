"""The event loop's work per async call does not grow with the number of calls in flight.

Counted, never timed: the loop's steps (``asyncio.Handle._run`` calls, as
``bench/suite/event_loop.py`` wraps it) and the Redis commands the loop's thread sends, per call,
with 20 and with 400 ``ainvoke`` calls in flight through a real worker. Work per call that grows
with the calls in flight (a task spinning on ``sleep(0)`` while it waits its turn, a scan of every
waiter per message, one wake-up of every waiter per connection handed back) makes the per-call
figure at 400 many times the one at 20; a constant per-call cost keeps them equal, give or take the
batching of a busier loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis.asyncio.connection as aconnection

from boundary import InvocationStatus, ToolBoundary, ToolCallEnvelope
from tests.celery.conftest import RUN
from tests.celery.test_async_waits import run_async, worker_process  # noqa: F401 (fixture)

#: In-flight counts compared.
FEW, MANY = 20, 400
#: Runs of each count; the least work per call of them is compared (what timing adds, a
#: reconnected pool connection or a record read twice, only ever adds).
RUNS = 2
#: How many more loop steps per call MANY may take than FEW. A call that waits for its seal
#: takes a few steps more than one whose seal came before its first read: measured 0.8-1.2.
#: A cost per call that grows with the calls in flight breaks it: an admission that let 4
#: waiting steps in per iteration while the others spun on ``sleep(0)`` measured 2.3
#: (35.5 -> 83.2 steps per call).
STEPS_BOUND = 1.5
#: The same for Redis commands: a call sends its create and reads its record once (the seal
#: came first) or twice (it waited), 2 to 3 commands, whatever the calls in flight.
COMMANDS_BOUND = 1.5
#: Not per-call work: a connection's handshake, the memory watermark's time-cached INFO.
UNCOUNTED = frozenset({"CLIENT", "HELLO", "SELECT", "AUTH", "INFO"})


@dataclass
class Work:
    calls: int
    steps: int
    commands: int

    @property
    def steps_per_call(self) -> float:
        return self.steps / self.calls

    @property
    def commands_per_call(self) -> float:
        return self.commands / self.calls


@contextmanager
def counted(thread_id: int) -> Iterator[list[int]]:
    """[loop steps, asyncio Redis commands sent from ``thread_id``] while inside."""
    counts = [0, 0]
    run = asyncio.events.Handle._run
    pack = aconnection.AbstractConnection.pack_command

    def counting_run(handle: asyncio.events.Handle) -> None:
        counts[0] += 1
        run(handle)

    def counting_pack(self: Any, *args: Any) -> Any:
        # Every command is packed once, a pipeline's one by one.
        if threading.get_ident() == thread_id and str(args[0]).upper() not in UNCOUNTED:
            counts[1] += 1
        return pack(self, *args)

    asyncio.events.Handle._run = counting_run  # type: ignore[method-assign,assignment]
    aconnection.AbstractConnection.pack_command = counting_pack  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        asyncio.events.Handle._run = run  # type: ignore[method-assign]
        aconnection.AbstractConnection.pack_command = pack  # type: ignore[method-assign]


def _calls(prefix: str, count: int) -> list[ToolCallEnvelope]:
    return [
        ToolCallEnvelope(
            run_id=RUN.run_id,
            tool_call_id=f"{prefix}-{n}",
            tool_name="lookup",
            arguments={"query": f"{prefix}-{n}"},
        )
        for n in range(count)
    ]


async def _work(boundary: ToolBoundary, prefix: str, count: int) -> Work:
    batch = _calls(prefix, count)
    with counted(threading.get_ident()) as counts:
        outcomes = await asyncio.gather(
            *(boundary.ainvoke(envelope, RUN, timeout=60) for envelope in batch)
        )
    assert all(o.status is InvocationStatus.READY for o in outcomes), outcomes[:3]
    return Work(count, counts[0], counts[1])


def test_the_loop_s_work_per_call_does_not_grow_with_the_calls_in_flight(
    worker_process: ToolBoundary,  # noqa: F811 (the fixture)
) -> None:
    boundary = worker_process

    async def body() -> tuple[list[Work], list[Work]]:
        # Given a warm boundary on one loop (its pool's connections open, scripts loaded)
        await _work(boundary, "warm", MANY)
        # When 20, then 400 calls run at once (twice each), loop steps and commands counted
        few, many = [], []
        for n in range(RUNS):
            few.append(await _work(boundary, f"few{n}", FEW))
            many.append(await _work(boundary, f"many{n}", MANY))
        return few, many

    few, many = run_async(boundary, body)
    few_steps = min(w.steps_per_call for w in few)
    many_steps = min(w.steps_per_call for w in many)
    few_commands = min(w.commands_per_call for w in few)
    many_commands = min(w.commands_per_call for w in many)
    print(
        f"per call: {few_steps:.1f} loop steps and {few_commands:.1f} Redis commands at "
        f"{FEW} in flight; {many_steps:.1f} and {many_commands:.1f} at {MANY}"
    )

    # Then the work per call at 400 is within a small factor of the one at 20
    assert many_steps <= few_steps * STEPS_BOUND
    assert many_commands <= few_commands * COMMANDS_BOUND
    # And the calls did cost the loop something (the counting saw them)
    assert few_steps >= 1 and few_commands >= 2
