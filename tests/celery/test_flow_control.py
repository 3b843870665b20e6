"""Fleet flow control on a real worker (the in-process one): calls of a limited tool wait in
Redis for a slot, are handed one when a slot frees, and are refused, cancelled or ended by
their deadline while they wait; tenants take turns; a rate limit holds starts back; a limit
raised at run time starts waiting calls. (Several worker processes and a kill -9:
``test_flow_fleet.py``.)"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from boundary import (
    ErrorCode,
    InvocationStatus,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.flow import Flow
from boundary.store import keys
from tasks.cli.main import cli
from tasks.runtime import get_runtime
from tasks.worker.calls import reap_stuck_calls
from tests.conftest import BROKER_DB, STORE_DB, redis_url
from tests.support import flow_tools, helpers
from tests.support.celery_tools import registry

RUN = RunContext(run_id="run-flow", authorized_tools=frozenset(spec.name for spec in registry))


def call(call_id: str, tool: str, run: RunContext = RUN, **arguments: object) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=run.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )


@pytest.fixture
def hold() -> Iterator[None]:
    """``hold`` calls hold their slot until the test (at the latest its end) lets them go."""
    flow_tools.HOLD.clear()
    yield
    flow_tools.HOLD.set()


def flow() -> Flow:
    installed = get_runtime().store.flow
    assert isinstance(installed, Flow)
    return installed


def wait_sealed(boundary: ToolBoundary, run_id: str, call_id: str) -> ToolOutcome:
    outcome = boundary.outcome(run_id, call_id, timeout=30)
    assert not outcome.pending, f"{call_id} still running after 30 s"
    return outcome


def wait_until(what: str, done: Any, seconds: float = 20.0) -> None:
    helpers.wait_until(done, what, seconds)


def no_slot_held(tool: str) -> None:
    """Every slot of ``tool`` is given up, and none waits: the seal that ends a call comes
    first (its outcome is seen then), the release right after it, in the worker."""

    def free() -> bool:
        status = flow().status(tool)
        return (status.running, status.waiting) == (0, 0)

    wait_until("every slot given up", free)


def started(redis_client: redis.Redis, tag: str) -> list[str]:
    """The calls of ``tag`` that started, in order (their tool_call_ids)."""
    order = redis_client.lrange(flow_tools.keys_of(tag)[4], 0, -1)
    return [identity.partition(":")[2] for identity in order]


def high_water(redis_client: redis.Redis, tag: str) -> int:
    return int(redis_client.get(flow_tools.keys_of(tag)[1]) or 0)


# --- a slot, a line, and what frees a slot -----------------------------------------------


def test_calls_past_the_limit_wait_in_redis_and_start_as_slots_free(
    celery_boundary: ToolBoundary, redis_client: redis.Redis, hold: None
) -> None:
    # Given one call holding the only slot of "narrow" and two more submitted behind it
    first = celery_boundary.submit(call("n1", "narrow", tag="n", hold=True), RUN)
    wait_until("started", lambda: started(redis_client, "n") == ["n1"])
    later = [celery_boundary.submit(call(f"n{i}", "narrow", tag="n"), RUN) for i in (2, 3)]
    assert first.accepted and all(s.accepted for s in later)
    # Then they wait in the store, not as Celery messages, and say so
    status = flow().status("narrow")
    assert (status.running, status.waiting) == (1, 2)
    broker = redis.Redis(
        host=redis_client.connection_pool.connection_kwargs["host"],
        port=redis_client.connection_pool.connection_kwargs["port"],
        db=BROKER_DB,
    )
    assert broker.llen("tools") == 0  # no message waits for a worker: the line is in Redis
    waiting = celery_boundary.outcome(RUN.run_id, "n3", timeout=0.05)
    assert waiting.pending and waiting.progress is not None
    assert waiting.progress.waiting and waiting.progress.ahead == 1
    assert waiting.progress.message == "waiting for a slot (1 ahead)"
    # When the first call ends
    flow_tools.HOLD.set()
    outcomes = [wait_sealed(celery_boundary, RUN.run_id, f"n{i}") for i in (1, 2, 3)]
    # Then the others ran one at a time, in order, and no slot is left held
    assert all(o.status is InvocationStatus.READY for o in outcomes), outcomes
    assert started(redis_client, "n") == ["n1", "n2", "n3"]
    assert high_water(redis_client, "n") == 1
    no_slot_held("narrow")


def test_a_call_past_max_waiting_is_tool_busy_and_nothing_is_created_or_charged(
    celery_boundary: ToolBoundary, redis_client: redis.Redis, hold: None
) -> None:
    # Given "narrow" (one at once, two may wait) with its slot held and two waiting
    run = RUN.model_copy(update={"max_tool_calls": 10})
    for i in (1, 2, 3):
        assert celery_boundary.submit(
            call(f"b{i}", "narrow", run, tag="b", hold=True), run
        ).accepted
    # When a fourth call comes
    refused = celery_boundary.submit(call("b4", "narrow", run, tag="b"), run)
    # Then it is refused TOOL_BUSY (retryable), with nothing created or charged
    assert not refused.accepted and refused.outcome is not None
    assert refused.outcome.error_code is ErrorCode.TOOL_BUSY and ErrorCode.TOOL_BUSY.retryable
    store = get_runtime().store
    assert store.get(refused.key) is None  # type: ignore[arg-type]
    assert redis_client.hget(keys.budget_key(RUN.run_id), "calls") == "3"
    assert flow().status("narrow").waiting == 2
    # And the same id may be used again once the line is shorter
    flow_tools.HOLD.set()
    for i in (1, 2, 3):
        assert wait_sealed(celery_boundary, RUN.run_id, f"b{i}").status is InvocationStatus.READY
    again = celery_boundary.invoke(call("b4", "narrow", run, tag="b"), run, timeout=30)
    assert again.status is InvocationStatus.READY


def test_cancel_takes_a_waiting_call_out_of_line_and_it_never_runs(
    celery_boundary: ToolBoundary, redis_client: redis.Redis, hold: None
) -> None:
    celery_boundary.submit(call("c1", "narrow", tag="c", hold=True), RUN)
    celery_boundary.submit(call("c2", "narrow", tag="c"), RUN)
    # When the waiting call is cancelled
    cancelled = celery_boundary.cancel(RUN.run_id, "c2")
    # Then it is CANCELLED at once and out of line
    assert cancelled.error_code is ErrorCode.CANCELLED
    assert flow().status("narrow").waiting == 0
    flow_tools.HOLD.set()
    assert wait_sealed(celery_boundary, RUN.run_id, "c1").status is InvocationStatus.READY
    # And it never ran, and its slot (the first call's) is free again
    assert "c2" not in started(redis_client, "c")
    no_slot_held("narrow")


def test_close_run_takes_the_run_s_waiting_calls_out_of_line(
    celery_boundary: ToolBoundary, redis_client: redis.Redis, hold: None
) -> None:
    run = RunContext(run_id="run-flow-close", authorized_tools=frozenset({"narrow"}))
    other = celery_boundary.submit(call("h1", "narrow", RUN, tag="x", hold=True), RUN)
    assert other.accepted
    for i in (1, 2):
        assert celery_boundary.submit(call(f"w{i}", "narrow", run, tag="x"), run).accepted
    assert flow().status("narrow").waiting == 2
    celery_boundary.close_run(run.run_id)
    assert flow().status("narrow").waiting == 0
    for i in (1, 2):
        outcome = celery_boundary.outcome(run.run_id, f"w{i}", timeout=1)
        assert outcome.error_code is ErrorCode.CANCELLED
    flow_tools.HOLD.set()
    assert wait_sealed(celery_boundary, RUN.run_id, "h1").status is InvocationStatus.READY


def test_a_waiting_call_whose_run_deadline_passes_is_sealed_without_running(
    celery_boundary: ToolBoundary, redis_client: redis.Redis, hold: None
) -> None:
    store = get_runtime().store
    run = RUN.model_copy(
        update={"run_id": "run-flow-late", "deadline": store.now() + timedelta(seconds=1)}
    )
    celery_boundary.submit(call("d1", "narrow", RUN, tag="d", hold=True), RUN)
    assert celery_boundary.submit(call("d2", "narrow", run, tag="d"), run).accepted
    # When the deadline has passed on the store's clock and the reaper makes its pass
    wait_until("past the deadline", lambda: store.now() > run.deadline)  # type: ignore[operator]
    reap_stuck_calls()
    # Then the waiting call is sealed RUN_DEADLINE_EXCEEDED and never ran
    outcome = celery_boundary.outcome(run.run_id, "d2", timeout=1)
    assert outcome.error_code is ErrorCode.RUN_DEADLINE_EXCEEDED
    assert flow().status("narrow").waiting == 0
    flow_tools.HOLD.set()
    assert wait_sealed(celery_boundary, RUN.run_id, "d1").status is InvocationStatus.READY
    assert started(redis_client, "d") == ["d1"]


def test_raising_a_limit_at_run_time_starts_waiting_calls(
    celery_boundary: ToolBoundary,
    redis_client: redis.Redis,
    hold: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    celery_boundary.submit(call("r1", "narrow", tag="r", hold=True), RUN)
    for i in (2, 3):
        celery_boundary.submit(call(f"r{i}", "narrow", tag="r", hold=True), RUN)
    wait_until("started", lambda: started(redis_client, "r") == ["r1"])
    # When an operator raises the limit with the CLI (no restart)
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", redis_url(STORE_DB))
    monkeypatch.setenv("TOOL_BOUNDARY_BROKER_URL", redis_url(BROKER_DB))
    monkeypatch.setenv("TOOL_BOUNDARY_TOOLS", "tests.support.celery_tools:registry")
    try:
        result = CliRunner().invoke(cli, ["limits", "set", "narrow", "--concurrency", "3"])
        assert result.exit_code == 0, result.output
        assert "2 waiting call(s) started" in result.output
        # Then the waiting calls start at once, while the first still holds its slot
        wait_until("started", lambda: sorted(started(redis_client, "r")) == ["r1", "r2", "r3"])
        status = flow().status("narrow")
        assert (status.running, status.waiting, status.limits.concurrency) == (3, 0, 3)
        listed = CliRunner().invoke(cli, ["limits", "--json"])
        assert listed.exit_code == 0, listed.output
        assert '"tool":"narrow"' in listed.output and '"concurrency":3' in listed.output
    finally:
        reset = CliRunner().invoke(cli, ["limits", "reset", "narrow"])
        assert reset.exit_code == 0, reset.output
    flow_tools.HOLD.set()
    for i in (1, 2, 3):
        assert wait_sealed(celery_boundary, RUN.run_id, f"r{i}").status is InvocationStatus.READY
    assert flow().status("narrow").limits.concurrency == 1


# --- tenants take turns ----------------------------------------------------------------------


def test_one_tenant_s_long_line_delays_another_s_calls_by_one_turn_each(
    celery_boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    a = RUN.model_copy(update={"run_id": "run-flow-a", "tenant": "acme"})
    b = RUN.model_copy(update={"run_id": "run-flow-b", "tenant": "beta"})
    # Given tenant A's 300 calls of "turns" (two at once) submitted first
    for i in range(300):
        assert celery_boundary.submit(call(f"a{i}", "turns", a, tag="f", ms=10), a).accepted
    before = len(started(redis_client, "f"))
    # When tenant B submits 5
    for i in range(5):
        assert celery_boundary.submit(call(f"b{i}", "turns", b, tag="f", ms=10), b).accepted
    for i in range(300):
        wait_sealed(celery_boundary, a.run_id, f"a{i}")
    for i in range(5):
        wait_sealed(celery_boundary, b.run_id, f"b{i}")
    # Then each of B's calls started within one turn of each tenant (A's and B's turns
    # alternate; a slot's worth of slack for calls granted together that start in either
    # order), long before A's line ended
    order = started(redis_client, "f")[before:]
    for i in range(5):
        assert order.index(f"b{i}") <= 2 * (i + 1) + 2, order[:20]
    assert order.index("b4") < order.index("a299")
    assert high_water(redis_client, "f") <= 2


def test_with_tenant_concurrency_one_no_tenant_ever_runs_two(
    celery_boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    runs = [
        RUN.model_copy(update={"run_id": f"run-flow-t{t}", "tenant": f"tenant{t}"})
        for t in range(3)
    ]
    for i in range(8):
        for t, run in enumerate(runs):
            envelope = call(f"c{i}", "per_tenant", run, tag="pt", ms=40, tenant=f"tenant{t}")
            assert celery_boundary.submit(envelope, run).accepted
    for i in range(8):
        for run in runs:
            outcome = wait_sealed(celery_boundary, run.run_id, f"c{i}")
            assert outcome.status is InvocationStatus.READY
    per_tenant = redis_client.hgetall(flow_tools.keys_of("pt")[3])
    assert per_tenant == {f"tenant{t}": "1" for t in range(3)}
    assert high_water(redis_client, "pt") <= 3


# --- the rate limit --------------------------------------------------------------------------


def test_a_rate_limit_holds_starts_to_its_limit_in_any_second_of_the_store_s_clock(
    celery_boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    # Given 70 calls of "rated" (20 starts a second) offered at once
    for i in range(70):
        assert celery_boundary.submit(call(f"q{i}", "rated", tag="q", ms=1), RUN).accepted
    for i in range(70):
        assert wait_sealed(celery_boundary, RUN.run_id, f"q{i}").status is InvocationStatus.READY
    # Then no window of one second (store clock, as the tool saw its start) holds more than
    # 20 starts, so the 70 took at least three seconds from the first start to the last
    starts = sorted(
        int(entry.rpartition("|")[2])
        for entry in redis_client.lrange(flow_tools.keys_of("q")[5], 0, -1)
    )
    assert len(starts) == 70
    for n in range(len(starts) - 20):
        assert starts[n + 20] - starts[n] >= 1000, (n, starts[n : n + 21])
    per_second: dict[int, int] = {}
    for at in starts:
        per_second[at // 1000] = per_second.get(at // 1000, 0) + 1
    assert max(per_second.values()) <= 20
    assert starts[-1] - starts[0] >= 3000


# --- a tool without limits -------------------------------------------------------------------


def test_a_tool_without_limits_never_touches_flow_control(
    celery_boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    outcome = celery_boundary.invoke(call("u1", "lookup", query="x"), RUN, timeout=30)
    assert outcome.status is InvocationStatus.READY
    assert not list(redis_client.scan_iter(match="tb:flow:*"))


# --- the async path ----------------------------------------------------------------------------


def test_ainvoke_of_a_limited_tool_waits_its_turn_without_blocking_the_loop(
    celery_boundary: ToolBoundary, redis_client: redis.Redis, hold: None
) -> None:
    import asyncio

    async def body() -> tuple[ToolOutcome, ToolOutcome]:
        first = await celery_boundary.asubmit(call("y1", "narrow", tag="y", hold=True), RUN)
        assert first.accepted
        waiting = await celery_boundary.ainvoke(call("y2", "narrow", tag="y"), RUN, timeout=0.2)
        flow_tools.HOLD.set()
        done = await celery_boundary.aoutcome(RUN.run_id, "y2", timeout=30)
        await celery_boundary.aclose()
        return waiting, done

    waiting, done = asyncio.run(body())
    assert waiting.pending and waiting.progress is not None and waiting.progress.waiting
    assert waiting.progress.ahead == 0
    assert done.status is InvocationStatus.READY
    assert started(redis_client, "y") == ["y1", "y2"]
