"""The fleet's own flow-control entries (``boundary.flow.Reserved``: re-projection chunks)
against real Redis, without Celery: holders with no call record, whose leases the sweep
frees by expiry, fenced by attempt; the job's fencing tokens; and what a process that does
not know an entry leaves alone."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from boundary import CanonicalKey, RedisCanonicalStore, ToolRegistry
from boundary.flow import RELEASE_RENEWED, RELEASE_STALE, Flow, Reserved
from boundary.reaper import sweep_reserved
from boundary.store import keys
from boundary.store.flow import Admitted, FlowStanding, ToolLimits
from boundary.store.redis_jobs import RedisJobs
from tasks.worker.chunk_slots import REPROJECT_SLOTS, lane_key, take
from tests.support.helpers import wait_until

ENTRY = "tool_boundary.test-chunks"
#: Long enough that no lease runs out during a test that does not wait for it.
LONG_LEASE_S = 600.0
#: Short enough to wait for (a give-up below, never an assertion on time).
SHORT_LEASE_S = 0.05
GIVE_UP_S = 30.0


class Sent:
    """The ``send`` of a reserved entry: records the holders handed a slot."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def __call__(self, key: CanonicalKey, attempt: int) -> None:
        self.sent.append((key.identity, attempt))


@pytest.fixture
def store(redis_client: redis.Redis) -> RedisCanonicalStore:
    return RedisCanonicalStore(client=redis_client, ttl_s=600)


def reserved_flow(store: RedisCanonicalStore, lease_s: float) -> tuple[Flow, Reserved, Sent]:
    sent = Sent()
    entry = Reserved(
        name=ENTRY, limits=ToolLimits(concurrency=1, lease_s=lease_s), send=sent.__call__
    )
    flow = Flow(store, ToolRegistry(), None)
    flow.reserve(entry)
    return flow, entry, sent


def admit(flow: Flow, entry: Reserved, key: CanonicalKey, attempt: int) -> Admitted:
    reply = flow.ops.admit(
        ENTRY,
        entry.limits,
        key,
        attempt=attempt,
        tenant=key.run_id,
        priority=0,
        deadline=None,
        record_exists=True,
    )
    flow.deliver(ENTRY, reply)
    return reply.admitted


def sweep_until_freed(flow: Flow, entry: Reserved) -> int:
    fixed: int = wait_until(lambda: sweep_reserved(flow, entry), "the lease to be freed", GIVE_UP_S)
    return fixed


def test_a_lease_renewed_in_time_is_not_freed_as_expired(store: RedisCanonicalStore) -> None:
    flow, entry, _ = reserved_flow(store, LONG_LEASE_S)
    holder = lane_key("job-1", 0)
    assert admit(flow, entry, holder, 1) is Admitted.GRANTED
    # The sweep finds nothing due, and an explicit expired release is refused
    assert sweep_reserved(flow, entry) == 0
    refused = flow.ops.release(ENTRY, entry.limits, holder, attempt=1, expired=True)
    assert refused.code == RELEASE_RENEWED
    # (its reply says when the lease runs out)
    assert 0 < refused.wake_at_ms - refused.now_ms <= LONG_LEASE_S * 1000
    assert flow.ops.state(ENTRY, entry.limits, holder).standing is FlowStanding.HOLDS


def test_an_unrenewed_lease_is_freed_by_the_sweep_and_the_next_holder_is_sent(
    store: RedisCanonicalStore,
) -> None:
    # Given a holder whose lease is short, and a second holder waiting in line
    flow, entry, sent = reserved_flow(store, SHORT_LEASE_S)
    dead, next_ = lane_key("job-1", 0), lane_key("job-2", 0)
    assert admit(flow, entry, dead, 1) is Admitted.GRANTED
    assert admit(flow, entry, next_, 1) is Admitted.WAITING
    # When the first holder never renews (its worker died) and the sweep passes
    assert sweep_until_freed(flow, entry) == 1
    # Then its slot went to the one in line, sent through the entry's own send
    assert sent.sent == [(next_.identity, 1)]
    assert flow.ops.state(ENTRY, entry.limits, dead).standing is FlowStanding.NONE
    assert flow.ops.state(ENTRY, entry.limits, next_).attempt == 1
    # And the dead holder's late release and renewal change nothing
    assert flow.ops.release(ENTRY, entry.limits, dead, attempt=1).code == 0
    assert not flow.ops.renew(ENTRY, entry.limits, dead, 1)
    assert flow.status(ENTRY).running == 1


def test_a_stale_holder_never_renews_nor_releases_its_lane_s_newer_slot(
    store: RedisCanonicalStore,
) -> None:
    # Given a lane whose attempt 1 lost its lease and whose attempt 2 holds the slot now
    flow, entry, _ = reserved_flow(store, SHORT_LEASE_S)
    lane = lane_key("job-1", 0)
    assert admit(flow, entry, lane, 1) is Admitted.GRANTED
    sweep_until_freed(flow, entry)
    long = Reserved(name=ENTRY, limits=ToolLimits(concurrency=1, lease_s=LONG_LEASE_S),
                    send=entry.send)  # fmt: skip
    assert admit(flow, long, lane, 2) is Admitted.GRANTED
    # When attempt 1 resumes: its renewal and its release are refused
    assert not flow.ops.renew(ENTRY, long.limits, lane, 1)
    assert flow.ops.release(ENTRY, long.limits, lane, attempt=1).code == RELEASE_STALE
    # And a sweep that read attempt 1 as due frees nothing of attempt 2
    expired = flow.ops.release(ENTRY, long.limits, lane, attempt=1, expired=True)
    assert expired.code == RELEASE_STALE
    state = flow.ops.state(ENTRY, long.limits, lane)
    assert (state.standing, state.attempt) == (FlowStanding.HOLDS, 2)
    assert flow.ops.renew(ENTRY, long.limits, lane, 2)


def test_a_granted_holder_whose_send_failed_is_sent_again_by_the_sweep(
    store: RedisCanonicalStore,
) -> None:
    flow, entry, sent = reserved_flow(store, LONG_LEASE_S)
    flow.ops.mark_unsent(ENTRY, lane_key("job-1", 0))  # (as a failed send marks it)
    assert admit(flow, entry, lane_key("job-1", 0), 3) is Admitted.GRANTED
    assert sweep_reserved(flow, entry) == 1
    assert sent.sent == [(lane_key("job-1", 0).identity, 3)]


def test_a_process_that_does_not_know_an_entry_leaves_it_alone(
    store: RedisCanonicalStore,
) -> None:
    # Given an entry with holders and an override, and a process that does not know it
    flow, entry, _ = reserved_flow(store, SHORT_LEASE_S)
    assert admit(flow, entry, lane_key("job-1", 0), 1) is Admitted.GRANTED
    assert admit(flow, entry, lane_key("job-2", 0), 1) is Admitted.WAITING
    store.flow_ops.set_override(ENTRY, {"concurrency": 1})
    stranger = Flow(store, ToolRegistry(), None)
    # Then it neither limits, sweeps nor pumps it (its sweep would read call records)
    assert stranger.limits(ENTRY) is None
    assert ENTRY not in stranger.limited_tools()
    assert stranger.pump(ENTRY) == 0
    # But lists it for its views, as overridden
    assert ENTRY in stranger.fleet_tools()
    assert flow.status(ENTRY).waiting == 1


def test_a_reserved_entry_needs_its_prefix_and_a_lease(store: RedisCanonicalStore) -> None:
    flow = Flow(store, ToolRegistry(), None)
    for name, limits in (("chunks", ToolLimits(lease_s=1)), (ENTRY, ToolLimits())):
        with pytest.raises(ValueError, match="reserved entry"):
            flow.reserve(Reserved(name=name, limits=limits, send=Sent()))


def test_a_lane_s_fencing_token_counts_up_and_never_recreates_a_gone_job(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    jobs = RedisJobs.of(store)
    assert jobs is not None
    created, _ = jobs.start("job-1", {"selection": {}}, 2, "0")
    assert created
    assert [jobs.next_slot("job-1", 0) for _ in range(3)] == [1, 2, 3]
    assert jobs.next_slot("job-1", 1) == 1
    # (the job itself reads as before)
    job = jobs.get("job-1")
    assert job is not None and job.cursors == {0: "0", 1: "0"} and job.ended == frozenset()
    assert jobs.next_slot("gone", 0) == 0
    assert not redis_client.exists(keys.job_key("gone"))


def reserved(lease_s: float) -> Reserved:
    """The chunks' cap itself, with ``lease_s``."""
    limits = ToolLimits(concurrency=1, lease_s=lease_s)
    return Reserved(name=REPROJECT_SLOTS, limits=limits, send=Sent())


def test_a_chunk_frees_its_lane_s_expired_lease_and_comes_back_for_a_live_one(
    store: RedisCanonicalStore,
) -> None:
    jobs = RedisJobs.of(store)
    assert jobs is not None
    jobs.start("job-1", {"selection": {}}, 1, "0")
    flow = Flow(store, ToolRegistry(), None)
    again: list[tuple[int, float]] = []

    def ask(seen: int | None = None) -> Any:
        return take(flow, jobs, "job-1", 0, slot=None, seen=seen,
                    on_again=lambda holder, delay: again.append((holder, delay)))  # fmt: skip

    # Given a chunk of the lane holding a live lease
    flow.reserve(reserved(LONG_LEASE_S))
    first = ask()
    assert first.hold is not None and first.hold.attempt == 1
    # When a duplicate of the lane asks: it comes back when that lease would run out
    assert ask().state == "again"
    assert again[0][0] == 1 and 0 < again[0][1] <= LONG_LEASE_S + 1
    # And once back, it is dropped if the lane moved on to another holder
    assert ask(seen=99).state == "duplicate"

    # Given a lane whose holder stopped renewing (short lease, run out)
    flow.reserve(reserved(SHORT_LEASE_S))
    flow.ops.release(REPROJECT_SLOTS, ToolLimits(), lane_key("job-1", 0))
    stalled = ask()
    assert stalled.hold is not None
    time.sleep(SHORT_LEASE_S * 4)  # (it never renews)
    # When another chunk of the lane asks: it frees the expired lease and takes the slot
    taken = ask()
    assert taken.hold is not None and taken.hold.attempt > stalled.hold.attempt
    # And the stalled holder is fenced out
    limits = flow.reserved[REPROJECT_SLOTS].limits
    assert not flow.ops.renew(REPROJECT_SLOTS, limits, lane_key("job-1", 0), stalled.hold.attempt)
    stale = flow.ops.release(
        REPROJECT_SLOTS, limits, lane_key("job-1", 0), attempt=stalled.hold.attempt
    )
    assert stale.code == RELEASE_STALE


def test_the_metrics_gauges_export_the_chunks_cap_and_its_lanes_holding_and_waiting(
    store: RedisCanonicalStore,
) -> None:
    from types import SimpleNamespace

    from boundary import telemetry
    from tasks.worker.metrics_endpoint import StoreGauges, metrics_flow, store_gauges
    from tests.conftest import celery_test_settings

    # Given the worker's gauges' flow control (the cap from its settings: 1 slot)
    settings = celery_test_settings(reproject_concurrency=1)
    flow = metrics_flow(SimpleNamespace(store=store, registry=ToolRegistry(), settings=settings))
    entry = flow.reserved[REPROJECT_SLOTS]
    # And two lanes of a job asking for a slot: one holds it, one waits
    for lane in (0, 1):
        flow.ops.admit(REPROJECT_SLOTS, entry.limits, lane_key("job-1", lane), attempt=1,
                       tenant="job-1", priority=0, deadline=None, record_exists=True)  # fmt: skip
    # Then the gauges carry the cap, the lane holding and the lane waiting, by entry name
    gauges = store_gauges(store, flow)
    assert gauges[telemetry.CALLS_LIMIT.name] == {REPROJECT_SLOTS: 1.0}
    assert gauges[telemetry.CALLS_RUNNING.name] == {REPROJECT_SLOTS: 1.0}
    assert gauges[telemetry.CALLS_WAITING.name] == {REPROJECT_SLOTS: 1.0}
    # And an operator's override of the cap is the figure exported
    flow.ops.set_override(REPROJECT_SLOTS, {"concurrency": 3})
    assert store_gauges(store, flow)[telemetry.CALLS_LIMIT.name] == {REPROJECT_SLOTS: 3.0}
    # And Prometheus gets them under the limited tools' names, labelled by the entry
    telemetry.set_gauge_source(lambda: store_gauges(store, flow))
    try:
        families = {f.name: f for f in StoreGauges().collect()}
    finally:
        telemetry.set_gauge_source(None)
    # (the override takes effect at the next step: the lane still waits)
    for name, value in (("limit", 3.0), ("running", 1.0), ("waiting", 1.0)):
        samples = {
            (s.labels["tool"], s.value) for s in families[f"tool_boundary_calls_{name}"].samples
        }
        assert samples == {(REPROJECT_SLOTS, value)}, name


def test_jobs_cancel_takes_the_job_s_waiting_lanes_out_of_the_cap_s_line(
    store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from tasks.cli.main import EXIT_OK, cli
    from tests.conftest import STORE_DB, redis_url

    jobs = RedisJobs.of(store)
    assert jobs is not None
    jobs.start("job-1", {"selection": {}}, 3, "0")
    jobs.start("job-2", {"selection": {}}, 1, "0")
    flow, entry, sent = Flow(store, ToolRegistry(), None), reserved(LONG_LEASE_S), Sent()
    entry = Reserved(name=REPROJECT_SLOTS, limits=entry.limits, send=sent.__call__)
    flow.reserve(entry)

    def ask(job_id: str, lane: int) -> Admitted:
        reply = flow.ops.admit(REPROJECT_SLOTS, entry.limits, lane_key(job_id, lane),
                               attempt=jobs.next_slot(job_id, lane), tenant=job_id, priority=0,
                               deadline=None, record_exists=True)  # fmt: skip
        return reply.admitted

    # Given a job whose lane 0 holds the cap's one slot and lanes 1 and 2 wait, and another
    # job's lane waiting behind them
    assert [ask("job-1", n) for n in range(3)] == [Admitted.GRANTED] + [Admitted.WAITING] * 2
    assert ask("job-2", 0) is Admitted.WAITING
    assert flow.ops.status(REPROJECT_SLOTS, entry.limits).waiting == 3
    # When the first job is cancelled
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", redis_url(STORE_DB))
    result = CliRunner().invoke(cli, ["jobs", "cancel", "job-1"])
    assert result.exit_code == EXIT_OK, result.output
    # Then its waiting lanes have left the line (the other job's lane is next), and ended
    # where they were; the lane holding the slot still holds it until its chunk ends
    standing = [flow.ops.state(REPROJECT_SLOTS, entry.limits, lane_key("job-1", n)).standing
                for n in range(3)]  # fmt: skip
    assert standing == [FlowStanding.HOLDS, FlowStanding.NONE, FlowStanding.NONE]
    other = flow.ops.state(REPROJECT_SLOTS, entry.limits, lane_key("job-2", 0))
    assert other.standing is FlowStanding.WAITS and other.ahead == 0
    job = jobs.get("job-1")
    assert job is not None and job.ended == frozenset({1, 2}) and job.state == "running"
    # And when the holding lane gives its slot up, the other job's lane is handed it
    flow.release(lane_key("job-1", 0), REPROJECT_SLOTS, entry.limits, attempt=1)
    assert sent.sent == [(lane_key("job-2", 0).identity, 1)]
