"""Waits through real workers: the async boundary, waits that end at their timeout (never
before it) with the real state on both dispatchers (sync and async), pending outcomes picked up
later, cancelled waits that leak nothing, and an event loop that no synchronous call blocks
while 200 calls run.

No assertion here depends on the machine's speed: how late a wait returns or how late the
loop wakes is printed (``-s``) and measured by bench B7 (``bench/README.md``); what is
asserted is what load cannot change (never early, the real state, no synchronous Redis call
on the loop's thread, CPU time of a loop step). A wait that never ends is a hung test
(``HANG_S``)."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from celery import Celery

from bench.suite.event_loop import step_cpu_times
from bench.suite.event_loop import ticker as tick
from boundary import (
    CanonicalKey,
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
    ToolRegistry,
)
from boundary.store import keys
from boundary.store.aio import NOTIFY_CLIENT_NAME
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.helpers import FakeTool, create_projecting, is_running, make_run, register

T = TypeVar("T")

#: Requested waits of the precision tests, seconds, and how often each is measured.
PRECISION_WAITS = (0.05, 0.05, 0.05, 0.05, 0.2, 0.2, 0.2, 1.0)
#: A wait this much past its timeout has hung (it ignored its timeout): only a broken wait
#: reaches it, never a slow machine. How late waits really are is bench B7's figure.
HANG_S = 60.0
#: A clock read a moment apart may disagree by this much: not "early".
CLOCK_SLACK_S = 0.005


def call(call_id: str, tool: str = "lookup", **arguments: Any) -> ToolCallEnvelope:
    arguments = arguments or {"query": call_id}
    return ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )


def run_async(boundary: ToolBoundary, body: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            return await body()
        finally:
            await boundary.aclose()

    return asyncio.run(main())


def test_ainvoke_through_a_real_worker_matches_invoke(celery_boundary: ToolBoundary) -> None:
    async def body() -> list[ToolOutcome]:
        return list(
            await asyncio.gather(
                *(celery_boundary.ainvoke(call(f"a{i}"), RUN, timeout=30) for i in range(20))
            )
        )

    outcomes = run_async(celery_boundary, body)
    sync = celery_boundary.invoke(call("s0", query="a0"), RUN, timeout=30)
    assert [o.tool_call_id for o in outcomes] == [f"a{i}" for i in range(20)]
    assert all(o.status is InvocationStatus.READY for o in outcomes)
    assert outcomes[0].result == sync.result
    facts = run_async(celery_boundary, lambda: celery_boundary.aobserve(RUN))
    assert len(facts.facts) == 21


def test_a_pending_outcome_is_picked_up_later_as_ready(
    celery_boundary: ToolBoundary, held_calls: threading.Event
) -> None:
    # Given a call held on the worker until the test lets it go
    slow = call("slow_1", "held")

    async def body() -> tuple[ToolOutcome, ToolOutcome]:
        # When ainvoke gives up after 0.1 s, the call is let go, and its ids asked for later
        pending = await celery_boundary.ainvoke(slow, RUN, timeout=0.1)
        held_calls.set()
        return pending, await celery_boundary.aoutcome(RUN.run_id, "slow_1", timeout=30)

    pending, later = run_async(celery_boundary, body)
    # Then the first answer says "still running" and the second is READY
    assert is_running(pending, "slow_1"), pending
    assert later.status is InvocationStatus.READY
    assert later.result["first"] == "released"
    # And the sync outcome agrees
    assert celery_boundary.outcome(RUN.run_id, "slow_1", timeout=1) == later


# --- timeout precision --------------------------------------------------------------------


@dataclass
class Running:
    """A boundary, a run, and how to make a call of it that runs for the whole test."""

    boundary: ToolBoundary
    run: RunContext
    slow: Callable[[str], ToolCallEnvelope]
    #: The id of the call that runs for the whole test (unique: a worker still running an
    #: earlier test's call must not seal this test's record).
    long: str = field(default_factory=lambda: f"long-{uuid.uuid4().hex[:8]}")


@pytest.fixture(params=["celery", "inprocess"])
def running(request: pytest.FixtureRequest, redis_client: redis.Redis) -> Iterator[Running]:
    """Each test once per dispatcher; the call ``long`` stays PROJECTING for the whole test.

    Through Celery it is accepted but never dispatched (a tool sleeping that long would hold
    a worker thread into later tests): the wait on its project task's result is the same.
    Other calls are ``held`` until the test ends.
    """
    if request.param == "celery":
        boundary: ToolBoundary = request.getfixturevalue("celery_boundary")
        request.getfixturevalue("held_calls")
        current = Running(boundary, RUN, lambda call_id: call(call_id, "held"))
        create_projecting(get_runtime().store, current.long, run_id=RUN.run_id)
        yield current
        return
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    registry = ToolRegistry()
    release = threading.Event()
    register(registry, FakeTool(during=lambda arguments: release.wait(30)), name="lookup")
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    current = Running(boundary, make_run(RUN.run_id, tools=("lookup",)), call)
    assert boundary.submit(current.slow(current.long), current.run).accepted
    yield current
    release.set()


def assert_never_early_and_print_lateness(waits: list[tuple[float, float]], what: str) -> None:
    """No wait returned before its timeout, none hung; how late they were is printed only."""
    late = [took - asked for asked, took in waits]
    assert min(late) > -CLOCK_SLACK_S, f"a wait returned early: {late}"
    assert max(late) < HANG_S, f"a wait ignored its timeout: {late}"
    print(
        f"{what}: lateness median {statistics.median(late) * 1000:.1f} ms, "
        f"worst {max(late) * 1000:.1f} ms (bench B7 measures it)"
    )


def test_sync_waits_answer_on_time_with_the_real_state(running: Running) -> None:
    waits = []
    for asked in PRECISION_WAITS:
        started = time.monotonic()
        outcome = running.boundary.outcome(running.run.run_id, running.long, timeout=asked)
        waits.append((asked, time.monotonic() - started))
        assert is_running(outcome, running.long), outcome
    assert_never_early_and_print_lateness(waits, "sync waits")


def test_async_waits_answer_on_time_with_the_real_state(running: Running) -> None:
    boundary = running.boundary

    async def body() -> list[tuple[float, float]]:
        waits = []
        for asked in PRECISION_WAITS:
            started = time.monotonic()
            outcome = await boundary.aoutcome(running.run.run_id, running.long, timeout=asked)
            waits.append((asked, time.monotonic() - started))
            assert is_running(outcome, running.long), outcome
        return waits

    waits = run_async(boundary, body)
    assert_never_early_and_print_lateness(waits, "async waits")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_invoke_timeout_bounds_the_whole_call(running: Running, mode: str) -> None:
    call_id = f"{running.long}-2"
    boundary, envelope = running.boundary, running.slow(call_id)
    started = time.monotonic()
    if mode == "sync":
        outcome = boundary.invoke(envelope, running.run, timeout=0.2)
    else:
        outcome = run_async(boundary, lambda: boundary.ainvoke(envelope, running.run, 0.2))
    took = time.monotonic() - started
    # The call cannot end before the test ends (it is held): "running" is the proof that
    # invoke returned at its timeout; not before it, and not hung
    assert is_running(outcome, call_id), outcome
    assert_never_early_and_print_lateness([(0.2, took)], f"{mode} invoke(timeout=0.2)")


# --- cancellation -------------------------------------------------------------------------


def seal_clients(redis_client: redis.Redis) -> list[dict[str, Any]]:
    """The seal notifier's connections of this test's store (its DB: a benchmark on the same
    server has its own)."""
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
    return [
        c
        for c in redis_client.client_list()
        if c.get("name") == NOTIFY_CLIENT_NAME and str(c.get("db")) == db
    ]


def numsub(redis_client: redis.Redis, channels: list[str]) -> int:
    return sum(n for _, n in redis_client.pubsub_numsub(*channels))


async def settled(probe: Callable[[], int], expected: int, within_s: float = 10.0) -> int:
    """``probe()`` once it equals ``expected`` (or its last value after ``within_s``): the
    server sees subscriptions change a moment after the client asks."""
    give_up = time.monotonic() + within_s
    value = probe()
    # Not wait_until: it waits in the event loop (wait_until would block it), and returns the
    # last value for the caller's assertion
    while value != expected and time.monotonic() < give_up:
        await asyncio.sleep(0.02)
        value = probe()
    return value


def test_cancelled_waits_leave_the_call_running_and_leak_nothing(
    celery_boundary: ToolBoundary, redis_client: redis.Redis, held_calls: threading.Event
) -> None:
    # Given one real call running on the worker (held until the test lets it go: a call that
    # sleeps 1 s could end before the waits are cancelled on a loaded machine), and 999 parked
    # calls over 20 runs
    store = get_runtime().store
    assert celery_boundary.submit(call("real", "held"), RUN).accepted
    parked = [create_projecting(store, f"p{i}", run_id=f"run-park-{i % 20}") for i in range(999)]
    waited = [CanonicalKey(run_id=RUN.run_id, tool_call_id="real"), *parked]
    channels = sorted({keys.sealed_channel(k.run_id) for k in waited})

    async def body() -> tuple[int, list[Any], int, ToolOutcome]:
        # (no subscription left on those channels by an earlier sync wait: its lingers 1 s)
        await settled(lambda: numsub(redis_client, channels), 0)
        # When 1,000 aoutcome waits start, then their tasks are cancelled
        tasks = [
            asyncio.create_task(celery_boundary.aoutcome(k.run_id, k.tool_call_id, timeout=60))
            for k in waited
        ]
        subscribed = await settled(lambda: numsub(redis_client, channels), len(channels))
        during = len(seal_clients(redis_client))
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await settled(lambda: numsub(redis_client, channels), 0)
        after = [n for _, n in redis_client.pubsub_numsub(*channels)]
        connections = len(seal_clients(redis_client))
        # Then the call still runs and ends READY, readable by the same ids
        held_calls.set()
        later = await celery_boundary.aoutcome(RUN.run_id, "real", timeout=30)
        return subscribed, [results, after, during], connections, later

    subscribed, (results, after, during), connections, later = run_async(celery_boundary, body)
    assert [type(r).__name__ for r in results if not isinstance(r, asyncio.CancelledError)] == []
    # While waiting, each channel was subscribed once, on one connection
    assert subscribed == len(channels)
    assert during == 1
    # After cancelling: no subscription left on any of their channels, and (nobody waiting)
    # no Pub/Sub connection either
    assert after == [0] * len(channels)
    assert connections == 0
    assert later.status is InvocationStatus.READY
    # And closing the boundary's async side closes that connection too
    assert seal_clients(redis_client) == []


# --- the event loop stays responsive -------------------------------------------------------

#: Calls in flight at once in the stall test.
STALL_CALLS = 200
#: The ticker's period, seconds.
TICK_S = 0.001
#: CPU time of one loop step that counts as holding the loop.
HEAVY_STEP_CPU_S = 0.020


@pytest.fixture
def worker_process(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> Iterator[ToolBoundary]:
    """A boundary over a real worker subprocess on a broker DB of its own, so the worker's
    threads do not share this process (and its GIL) with the event loop measured."""
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))
    broker = flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_stall")
    with celery_process(settings, *worker_args("stall-worker", concurrency=8), log=tmp_path / "w"):
        yield get_runtime().boundary(CeleryDispatcher(app))
    broker.flushdb()


@contextmanager
def sync_redis_calls_on(thread_id: int) -> Iterator[list[str]]:
    """The commands a synchronous Redis client sends from the thread ``thread_id`` (the event
    loop's): each one would block the loop until Redis answers. The async paths use asyncio
    Redis or threads, so this stays empty whatever the machine's load."""
    sent: list[str] = []
    original = redis.connection.AbstractConnection.send_packed_command

    def watched(self: Any, command: Any, check_health: bool = True) -> None:
        if threading.get_ident() == thread_id:
            sent.append(repr(command)[:80])
        original(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = watched  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        redis.connection.AbstractConnection.send_packed_command = original  # type: ignore[method-assign]


def test_the_event_loop_is_not_stalled_while_200_calls_run(worker_process: ToolBoundary) -> None:
    boundary = worker_process
    late: list[float] = []

    done: list[int] = []
    #: How many calls had ended at each tick of the ticker.
    ended_at_tick: list[int] = []
    loop_sends: list[str] = []

    async def one(n: int) -> ToolOutcome:
        outcome = await boundary.ainvoke(call(f"t{n}"), RUN, timeout=60)
        done.append(n)
        return outcome

    async def counting_ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(TICK_S)
            ended_at_tick.append(len(done))

    async def body() -> list[ToolOutcome]:
        stop = asyncio.Event()
        ticker = asyncio.create_task(tick(stop, TICK_S, late))
        counter = asyncio.create_task(counting_ticker(stop))
        await asyncio.sleep(0.05)
        with sync_redis_calls_on(threading.get_ident()) as sends:
            outcomes = await asyncio.gather(*(one(n) for n in range(STALL_CALLS)))
        loop_sends.extend(sends)
        stop.set()
        await ticker
        await counter
        return list(outcomes)

    # Garbage collection frozen meanwhile: what is measured is the boundary's own work.
    with step_cpu_times() as steps:
        outcomes = run_async(boundary, body)
    assert all(o.status is InvocationStatus.READY for o in outcomes)
    # No synchronous Redis command was sent from the loop's thread (it would block the loop
    # until Redis answered), and the loop kept running other tasks while calls were pending:
    # the ticker ticked between the first call's end and the last one's
    assert loop_sends == [], loop_sends[:5]
    assert any(0 < ended < STALL_CALLS for ended in ended_at_tick), "the ticker never ran"
    # No step of the boundary's code holds the loop anywhere near a stall, measured as CPU
    # time of the loop's thread, which other processes cannot take (a CPU-bound call in the
    # loop regresses it). Counted, not the maximum: a loaded machine can still inflate a
    # rare step (caches, a collection), while a per-call blocking step would be 200 of them
    heavy = sorted(step for step in steps if step > HEAVY_STEP_CPU_S)
    assert len(heavy) < STALL_CALLS // 10, (len(heavy), heavy[-5:])
    print(
        f"loop steps: {len(steps)}, over 20 ms CPU: {len(heavy)}, most {max(steps) * 1000:.1f} ms"
    )
    print(
        f"loop ticker lateness: median {statistics.median(late) * 1000:.2f} ms, "
        f"worst {max(late) * 1000:.1f} ms over {len(late)} ticks"
    )
