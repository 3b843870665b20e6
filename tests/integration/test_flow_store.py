"""Fleet flow control in the store, without Celery: what a submit costs, who is handed a slot
and in which order, what the reaper's sweep sets right, and the same on a Redis Cluster."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from boundary import (
    CanonicalKey,
    ErrorCode,
    InProcessDispatcher,
    InvocationStatus,
    RateLimit,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
    ToolSpec,
)
from boundary.flow import Flow
from boundary.reaper import Retries, sweep_flow
from boundary.store import keys
from boundary.store.flow import Admitted, FlowStanding, ToolLimits
from tests.support.helpers import EchoProjector, FakeTool, create_terms, monitored, wait_until
from tests.support.servers import RedisServer, redis_cluster


class Recorder:
    """A sender that only records what it was asked to send."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, int, str]] = []
        self.fail = fail

    def send_attempt(
        self, key: CanonicalKey, *, attempt: int, queue: str, countdown_s: float = 0.0
    ) -> None:
        if self.fail:
            raise RuntimeError("broker down: redis://:secret@broker:6379")
        self.sent.append((key.tool_call_id, attempt, queue))

    def dispatch(self, key: CanonicalKey) -> None:
        self.send_attempt(key, attempt=1, queue="tools")

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


def tools() -> ToolRegistry:
    common: dict[str, Any] = {"projector": EchoProjector(), "read_only": True}
    return ToolRegistry(
        [
            ToolSpec(name="free", executor=FakeTool({"x": 1}), **common),
            ToolSpec(name="one", executor=FakeTool({"x": 1}), concurrency=1, **common),
            ToolSpec(
                name="two", executor=FakeTool({"x": 1}), concurrency=2, queue="long", **common
            ),
            ToolSpec(
                name="rated",
                executor=FakeTool({"x": 1}),
                rate_limit=RateLimit(limit=2, period_s=60),
                **common,
            ),
        ]
    )


RUN = RunContext(run_id="run-fs", authorized_tools=frozenset({"free", "one", "two", "rated"}))


def key_of(call_id: str) -> CanonicalKey:
    return CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)


def call(call_id: str, tool: str, run: RunContext = RUN) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=run.run_id, tool_call_id=call_id, tool_name=tool, arguments={"q": call_id}
    )


@pytest.fixture
def parts(store: RedisCanonicalStore) -> tuple[ToolBoundary, Recorder]:
    recorder = Recorder()
    return ToolBoundary(store=store, registry=tools(), dispatcher=recorder), recorder


def flow_of(boundary: ToolBoundary) -> Flow:
    flow = boundary.store.flow
    assert isinstance(flow, Flow)
    return flow


# --- what a submit costs ---------------------------------------------------------------------


def test_a_tool_without_limits_pays_no_round_trip_for_flow_control(
    parts: tuple[ToolBoundary, Recorder], redis_client: redis.Redis
) -> None:
    boundary, _ = parts
    flow_of(boundary).refresh_overrides()  # (read off the caller's path once a second)
    assert boundary.submit(call("f0", "free"), RUN).accepted  # scripts loaded on the server
    with monitored(redis_client, round_trips=True) as commands:
        assert boundary.submit(call("f1", "free"), RUN).accepted
    # One script (the create), nothing of flow control
    scripts = [c for c in commands if c.startswith("evalsha")]
    assert len(scripts) == 1, commands
    assert not any("tb:flow" in c for c in commands)


def test_a_limited_tool_with_a_free_slot_costs_one_round_trip_more(
    parts: tuple[ToolBoundary, Recorder], redis_client: redis.Redis
) -> None:
    boundary, recorder = parts
    flow_of(boundary).refresh_overrides()
    assert boundary.submit(call("o0", "one"), RUN).accepted  # scripts loaded on the server
    boundary.store.seal_error(key_of("o0"), ErrorCode.CANCELLED)
    with monitored(redis_client, round_trips=True) as commands:
        assert boundary.submit(call("o1", "one"), RUN).accepted
    scripts = [c for c in commands if c.startswith("evalsha")]
    assert len(scripts) == 2, commands
    assert sum("tb:flow" in c for c in scripts) == 1
    assert recorder.sent[-1] == ("o1", 1, "tools")


# --- the line ---------------------------------------------------------------------------------


def test_calls_wait_in_priority_order_within_a_tenant_and_take_turns_between_tenants(
    parts: tuple[ToolBoundary, Recorder], store: RedisCanonicalStore
) -> None:
    boundary, recorder = parts
    a = RUN.model_copy(update={"run_id": "run-a", "tenant": "acme"})
    urgent = a.model_copy(update={"run_id": "run-a2", "priority": 5})
    b = RUN.model_copy(update={"run_id": "run-b", "tenant": "beta"})
    assert boundary.submit(call("x0", "one", a), a).accepted  # holds the slot
    for n in range(1, 4):
        assert boundary.submit(call(f"a{n}", "one", a), a).accepted
    assert boundary.submit(call("b1", "one", b), b).accepted
    assert boundary.submit(call("u1", "one", urgent), urgent).accepted
    # Calls ahead of each: acme's line is u1 (priority 5), a1, a2, a3; beta's b1 comes after
    # one turn of acme
    flow = flow_of(boundary)
    limits = ToolLimits(concurrency=1)

    def ahead(run: RunContext, call_id: str) -> int | None:
        key = CanonicalKey(run_id=run.run_id, tool_call_id=call_id)
        return flow.ops.state("one", limits, key).ahead

    assert [ahead(urgent, "u1"), ahead(b, "b1"), ahead(a, "a1"), ahead(a, "a2")] == [0, 1, 2, 3]
    # When each call ends in turn, the next is sent: u1, b1, a1, a2, a3
    order = []
    current = CanonicalKey(run_id=a.run_id, tool_call_id="x0")
    for _ in range(5):
        store.seal_error(current, ErrorCode.CANCELLED)
        sent = recorder.sent[-1][0]
        order.append(sent)
        run_id = {"u1": urgent.run_id, "b1": b.run_id}.get(sent, a.run_id)
        current = CanonicalKey(run_id=run_id, tool_call_id=sent)
    assert order == ["u1", "b1", "a1", "a2", "a3"]


def test_tool_busy_leaves_no_record_and_no_charge(store: RedisCanonicalStore) -> None:
    registry = ToolRegistry(
        [
            ToolSpec(
                name="tiny",
                executor=FakeTool({}),
                projector=EchoProjector(),
                read_only=True,
                concurrency=1,
                max_waiting=0,
            )
        ]
    )
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=Recorder())
    run = RunContext(run_id="run-busy", authorized_tools=frozenset({"tiny"}), max_tool_calls=5)
    assert boundary.submit(call("t1", "tiny", run), run).accepted
    refused = boundary.submit(call("t2", "tiny", run), run)
    assert refused.outcome is not None and refused.outcome.error_code is ErrorCode.TOOL_BUSY
    assert store.get(CanonicalKey(run_id=run.run_id, tool_call_id="t2")) is None
    assert store.run_summary(run.run_id).calls == 1  # type: ignore[union-attr]
    # The same call again under the first id is a duplicate, not busy
    again = boundary.submit(call("t1", "tiny", run), run)
    assert again.outcome is not None
    assert again.outcome.error_code is ErrorCode.DUPLICATE_TOOL_CALL


def test_a_rate_limited_tool_is_sent_no_more_than_its_limit_and_schedules_a_wake_up(
    parts: tuple[ToolBoundary, Recorder], store: RedisCanonicalStore
) -> None:
    boundary, recorder = parts
    for n in range(4):
        assert boundary.submit(call(f"r{n}", "rated"), RUN).accepted
    # Two sent (two a minute); the others wait, not sent
    assert [s[0] for s in recorder.sent] == ["r0", "r1"]
    flow = flow_of(boundary)
    # A start enters the window; with the window full of real starts a wake-up is due
    for n in range(2):
        key = key_of(f"r{n}")
        assert flow.started(key, "rated", 1) is not None
    status = flow.status("rated")
    assert (status.starts_in_period, status.waiting) == (2, 2)
    assert int(store.client.hget(keys.flow_keys("rated")[10], "wake_at") or 0) > 0


# --- the reaper's sweep --------------------------------------------------------------------


@pytest.fixture
def retries(parts: tuple[ToolBoundary, Recorder]) -> Retries:
    boundary, recorder = parts
    return Retries(
        registry=boundary.registry,
        sender=recorder,
        max_redispatches=2,
        max_pending_s=60,
        reap_grace_s=1,
    )


def test_the_sweep_frees_a_slot_whose_holder_was_sealed_without_giving_it_up(
    parts: tuple[ToolBoundary, Recorder], store: RedisCanonicalStore, retries: Retries
) -> None:
    boundary, recorder = parts
    flow = flow_of(boundary)
    assert boundary.submit(call("h1", "one"), RUN).accepted
    assert boundary.submit(call("h2", "one"), RUN).accepted
    # Given the holder sealed while the store did not hear of its slot (flow not told)
    store.flow = None
    store.seal_error(key_of("h1"), ErrorCode.WORKER_LOST)
    store.flow = flow
    assert flow.status("one").running == 1
    # When its lease is due and the reaper sweeps
    store.client.zadd(keys.flow_keys("one")[0], {f"{RUN.run_id}:h1": 0})
    sweep_flow(store, flow, retries)
    # Then the slot went to the waiting call, which was sent
    assert recorder.sent[-1] == ("h2", 1, "tools")
    assert flow.status("one").running == 1
    assert flow.ops.state("one", ToolLimits(), key_of("h2")).standing is FlowStanding.HOLDS


def test_the_sweep_sends_again_a_grant_whose_message_failed(
    parts: tuple[ToolBoundary, Recorder], store: RedisCanonicalStore, retries: Retries
) -> None:
    boundary, recorder = parts
    flow = flow_of(boundary)
    assert boundary.submit(call("g1", "two"), RUN).accepted
    assert boundary.submit(call("g2", "two"), RUN).accepted
    assert boundary.submit(call("g3", "two"), RUN).accepted
    # Given a slot handed to g3 whose message could not be sent (broker down)
    recorder.fail = True
    store.seal_error(key_of("g1"), ErrorCode.CANCELLED)
    recorder.fail = False
    assert [s[0] for s in recorder.sent] == ["g1", "g2"]
    # When the reaper sweeps
    sweep_flow(store, flow, retries)
    # Then g3 is sent as a new attempt (an old message, should it arrive, is stale)
    assert recorder.sent[-1] == ("g3", 2, "long")
    record = store.get(key_of("g3"))
    assert record is not None and record.attempt == 2


def test_the_sweep_puts_in_line_a_call_admitted_before_its_record_and_never_confirmed(
    parts: tuple[ToolBoundary, Recorder], store: RedisCanonicalStore, retries: Retries
) -> None:
    boundary, recorder = parts
    flow = flow_of(boundary)
    assert boundary.submit(call("s1", "one"), RUN).accepted
    # Given a submitter that died between its admission and putting the call in line
    key = key_of("s2")
    admitted = flow.admit(key, "one", ToolLimits(concurrency=1), RUN)
    assert admitted.admitted is Admitted.WAITING
    store.create(key, **create_terms(tool_name="one"))
    store.client.zadd(keys.flow_keys("one")[7], {key.identity: 0})  # admitted long ago
    # When the reaper sweeps
    sweep_flow(store, flow, retries)
    # Then it waits in line, and is sent once the slot frees
    assert flow.ops.state("one", ToolLimits(), key).standing is FlowStanding.WAITS
    store.seal_error(key_of("s1"), ErrorCode.CANCELLED)
    assert recorder.sent[-1] == ("s2", 1, "tools")


# --- on a Redis Cluster ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    with redis_cluster(tmp_path_factory.mktemp("flow-cluster")) as servers:
        yield servers


def test_a_limited_tool_on_a_redis_cluster_runs_one_at_a_time_across_runs(
    cluster: list[RedisServer],
) -> None:
    store = RedisCanonicalStore.from_url(cluster[0].url, ttl_s=600, cluster=True)
    running, peak, lock = [0], [0], threading.Lock()

    def one_at_a_time(arguments: dict[str, Any]) -> dict[str, Any]:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        threading.Event().wait(0.02)
        with lock:
            running[0] -= 1
        return {"ok": True}

    registry = ToolRegistry(
        [
            ToolSpec(
                name="solo",
                executor=one_at_a_time,
                projector=EchoProjector(),
                read_only=True,
                concurrency=1,
            )
        ]
    )
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    runs = [
        RunContext(run_id=f"cl-flow-{n}", authorized_tools=frozenset({"solo"})) for n in range(6)
    ]
    for run in runs:
        for c in range(3):
            assert boundary.submit(call(f"c{c}", "solo", run), run).accepted
    outcomes = [boundary.outcome(run.run_id, f"c{c}", timeout=30) for run in runs for c in range(3)]
    assert all(o.status is InvocationStatus.READY for o in outcomes), outcomes
    assert peak[0] == 1
    flow = flow_of(boundary)
    # (the last call's release follows its seal, on the dispatcher's thread)
    wait_until(lambda: flow.status("solo").running == 0, "the last slot given up")
    assert flow.status("solo").waiting == 0
    owners = {store.client.get_node_from_key(f"{{{run.run_id}}}").port for run in runs}
    assert len(owners) > 1  # the runs' records are on several nodes; the tool's keys on one


# --- metrics -----------------------------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.values: list[tuple[str, float, dict[str, str]]] = []

    def record(self, metric: Any, value: float, labels: Any) -> None:
        self.values.append((metric.prometheus, value, dict(labels)))


def test_the_gauges_and_the_slot_wait_of_a_limited_tool(
    parts: tuple[ToolBoundary, Recorder], store: RedisCanonicalStore
) -> None:
    from boundary import telemetry
    from tasks.worker.metrics_endpoint import StoreGauges, store_gauges

    boundary, _ = parts
    sink = Sink()
    telemetry.add_sink(sink)
    try:
        for n in range(4):
            assert boundary.submit(call(f"m{n}", "two"), RUN).accepted
        gauges = store_gauges(store, flow_of(boundary))
        # Two hold the two slots, two wait (per tool, fleet-wide)
        assert gauges[telemetry.CALLS_RUNNING.name] == {"one": 0.0, "two": 2.0, "rated": 0.0}
        assert gauges[telemetry.CALLS_WAITING.name] == {"one": 0.0, "two": 2.0, "rated": 0.0}
        telemetry.set_gauge_source(lambda: gauges)
        families = {f.name: f for f in StoreGauges().collect()}
        running = families["tool_boundary_calls_running"]
        assert {(s.labels["tool"], s.value) for s in running.samples} >= {("two", 2.0)}
        # When a slot frees, the next call's wait in line is recorded, labelled by its tool
        store.seal_error(key_of("m0"), ErrorCode.CANCELLED)
        waits = [v for v in sink.values if v[0] == "tool_boundary_slot_wait_seconds"]
        assert len(waits) == 1 and waits[0][2] == {"tool": "two"} and waits[0][1] >= 0
    finally:
        telemetry.metrics._sinks.remove(sink)
        telemetry.set_gauge_source(None)
