"""``Admission``: one event-loop iteration runs at most its budget of the async calls' steps;
the rest wait for later iterations in arrival order, and every step runs once.

The clock is the test's: each step "takes" a fixed time, so what is checked is how the steps
are spread over the loop's iterations, never how fast the machine is."""

from __future__ import annotations

import asyncio

import pytest

from boundary.admission import Admission, admission

#: What one step takes on the test's clock, and the budget: three steps an iteration.
STEP_S = 0.001
BUDGET_S = 0.0025


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _iterations(counter: list[int], stop: asyncio.Event) -> None:
    """Counts the loop's iterations: a callback that queues itself runs once per iteration."""
    loop = asyncio.get_running_loop()

    def tick() -> None:
        counter[0] += 1
        if not stop.is_set():
            loop.call_soon(tick)

    loop.call_soon(tick)


def _spread(calls: int) -> tuple[list[tuple[int, int]], Admission]:
    clock = Clock()
    gate = Admission(BUDGET_S, clock=clock)
    ran: list[tuple[int, int]] = []  # (call, iteration it ran in)
    iteration = [0]

    async def step(n: int) -> None:
        await gate.turn()
        ran.append((n, iteration[0]))
        clock.now += STEP_S  # the step's work

    async def body() -> None:
        stop = asyncio.Event()
        await _iterations(iteration, stop)
        await asyncio.sleep(0)
        await asyncio.gather(*(step(n) for n in range(calls)))
        stop.set()

    asyncio.run(body())
    return ran, gate


def test_many_steps_started_at_once_are_spread_over_iterations_in_order() -> None:
    # When 200 steps start in one gather
    ran, gate = _spread(200)

    # Then each ran once, in the order they came
    assert [n for n, _ in ran] == list(range(200))
    # And no iteration ran more steps than its budget holds (plus the one that finds it
    # spent), so the loop's other tasks ran between
    per_iteration: dict[int, int] = {}
    for _, iteration in ran:
        per_iteration[iteration] = per_iteration.get(iteration, 0) + 1
    assert max(per_iteration.values()) <= int(BUDGET_S / STEP_S) + 1, per_iteration
    assert len(per_iteration) >= 200 // (int(BUDGET_S / STEP_S) + 1)
    assert gate.deferred > 0 and gate.waiting == 0


def test_the_wake_ups_per_step_do_not_grow_with_the_steps_waiting() -> None:
    # Each waiting step is woken once (no step spins on sleep(0)): the deferrals stay below
    # one per step whether 50 or 500 wait
    for calls in (50, 500):
        ran, gate = _spread(calls)
        assert len(ran) == calls
        assert gate.deferred < calls


def test_a_cancelled_waiter_is_skipped_and_the_others_run() -> None:
    clock = Clock()
    gate = Admission(BUDGET_S, clock=clock)
    ran: list[int] = []

    async def step(n: int) -> None:
        await gate.turn()
        ran.append(n)
        clock.now += STEP_S

    async def body() -> None:
        tasks = [asyncio.create_task(step(n)) for n in range(20)]
        await asyncio.sleep(0)  # the first ones ran; the rest wait
        tasks[10].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[10], asyncio.CancelledError)

    asyncio.run(body())
    assert ran == [n for n in range(20) if n != 10]
    assert gate.waiting == 0


def test_each_loop_has_its_own_admission() -> None:
    async def get() -> Admission:
        return admission()

    first, second = asyncio.run(get()), asyncio.run(get())
    assert first is not second
    with pytest.raises(RuntimeError):
        admission()  # no running loop
