"""Fleet flow control across real worker processes (two threads pools and a prefork one):
a tool's concurrency holds across all of them, and a kill -9 of a worker holding slots
neither loses a call nor lets more run at once, nor leaves a slot held."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import (
    CanonicalKey,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.flow import Flow
from boundary.reaper import Retries, reap_once
from tasks import CeleryDispatcher
from tasks.wiring.app import create_app
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support import flow_tools
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("flow-fleet")]

RUN = RunContext(run_id="run-fleet", authorized_tools=frozenset({"slot3"}))
#: Workers of the fleet: (name, pool, concurrency).
FLEET = (("fleet-a", "threads", 4), ("fleet-b", "threads", 4), ("fleet-c", "prefork", 2))


class Fleet:
    def __init__(self, app: Celery, workers: dict[str, int]) -> None:
        self.app = app
        #: Worker name -> its process (group) id.
        self.workers = workers


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), tools="tests.support.flow_tools:registry"
    )
    flush_db(SUBPROCESS_BROKER_DB)
    logs = tmp_path_factory.mktemp("fleet")
    with ExitStack() as stack:
        workers = {
            name: stack.enter_context(
                celery_process(
                    settings, *worker_args(name, pool, concurrency), log=logs / f"{name}.log"
                )
            ).pid
            for name, pool, concurrency in FLEET
        }
        yield Fleet(create_app(settings, name="tests_fleet_client"), workers)


@pytest.fixture
def boundary(fleet: Fleet, redis_client: redis.Redis) -> ToolBoundary:
    """The caller's side: its own store (and flow control) sending to the fleet's broker."""
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    return ToolBoundary(
        store=store, registry=flow_tools.registry, dispatcher=CeleryDispatcher(fleet.app)
    )


def key_of(call_id: str) -> CanonicalKey:
    return CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)


def call(call_id: str, **arguments: object) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name="slot3", arguments=arguments
    )


def status(boundary: ToolBoundary) -> tuple[int, int]:
    flow = boundary.store.flow
    assert isinstance(flow, Flow)
    now = flow.status("slot3")
    return now.running, now.waiting


def no_slot_held(boundary: ToolBoundary) -> None:
    """Every slot is given up and none waits: the seal that ends a call comes first (its
    outcome is seen then), the worker's release right after it."""
    wait_until(lambda: status(boundary) == (0, 0), "every slot to be given up", 30, every=0.05)


def test_three_at_once_across_three_worker_processes_over_300_calls(
    boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    # Given 300 calls of "slot3" (three at once, fleet-wide) offered at once; the first three
    # wait for each other, so three at once is reached whatever the machine's speed
    for n in range(300):
        extra = {"until": 3} if n < 3 else {}
        assert boundary.submit(call(f"s{n}", tag="fleet", ms=10, **extra), RUN).accepted
    # When they have all ended
    outcomes = [boundary.outcome(RUN.run_id, f"s{n}", timeout=120) for n in range(300)]
    # Then every call is READY, no more than three ever ran at once, none is left waiting
    assert [o.status for o in outcomes] == [InvocationStatus.READY] * 300
    assert int(redis_client.get(flow_tools.keys_of("fleet")[1]) or 0) == 3
    no_slot_held(boundary)
    ran = redis_client.lrange(flow_tools.keys_of("fleet")[4], 0, -1)
    assert len(set(ran)) == 300


def test_a_worker_killed_while_holding_slots_loses_no_call_and_frees_its_slots(
    fleet: Fleet, boundary: ToolBoundary, redis_client: redis.Redis, tmp_path: Path
) -> None:
    running_key, high_water_key = flow_tools.keys_of("kill")[:2]
    # Given twelve long calls, three of them running
    for n in range(12):
        assert boundary.submit(call(f"k{n}", tag="kill", ms=1500), RUN).accepted
    give_up = time.monotonic() + 60
    wait_until(lambda: redis_client.hlen(running_key) >= 3, "three calls running at once", 60)
    # When the worker process (group) running one of them is killed -9
    groups = dict(fleet.workers)
    holders = redis_client.hkeys(running_key)
    pid = int(holders[0].split(":")[0])
    group = os.getpgid(pid)
    assert group in groups.values()
    dead = [m for m in holders if os.getpgid(int(m.split(":")[0])) == group]
    os.killpg(group, signal.SIGKILL)
    # (its executions never leave: they are taken off the count by hand, before any
    # reaper pass can hand their slots on)
    for member in dead:
        redis_client.hdel(running_key, member)
        redis_client.hincrby(flow_tools.keys_of("kill")[2], "_", -1)
    # And the reaper makes its passes (as beat would)
    retries = Retries(
        registry=flow_tools.registry,
        sender=CeleryDispatcher(fleet.app),
        max_redispatches=2,
        max_pending_s=600,
        reap_grace_s=1,
    )
    outcomes: dict[str, object] = {}

    def all_ended() -> bool:
        reap_once(
            boundary.store, lambda key: None, retry_after_s=5, max_reprojections=2, retries=retries
        )
        for n in range(12):
            if f"k{n}" not in outcomes:
                outcome = boundary.outcome(RUN.run_id, f"k{n}", timeout=0.01)
                if not outcome.pending:
                    outcomes[f"k{n}"] = outcome
        return len(outcomes) == 12

    patience = give_up + 120 - time.monotonic()
    wait_until(all_ended, "all twelve calls to end", patience, every=0.3)
    # Then every call ended READY (the killed ones on a later attempt), never more than
    # three ran at once, and no slot is left held
    assert all(o.status is InvocationStatus.READY for o in outcomes.values())  # type: ignore[attr-defined]
    retried = [r for n in range(12) if (r := boundary.store.get(key_of(f"k{n}"))) and r.attempt > 1]
    assert len(retried) >= len(dead)
    assert int(redis_client.get(high_water_key) or 0) <= 3
    no_slot_held(boundary)
