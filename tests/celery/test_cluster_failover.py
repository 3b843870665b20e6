"""A master failover in a 3-master, 3-replica Redis Cluster (the store; broker and results on
a plain Redis) while calls run: every accepted call ends READY or with a stable code, none
stays PROJECTING, the worker keeps serving, and the store URL names a node without
``TOOL_BOUNDARY_REDIS_CLUSTER`` (found out at start)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import ErrorCode, InvocationStatus, RedisCanonicalStore, RunContext
from boundary.store import keys
from tests.celery.failover import Load, outcomes_once_ended, served
from tests.conftest import celery_test_settings
from tests.support.helpers import wait_until
from tests.support.servers import redis_cluster, redis_server

#: Runs the load spreads its calls over (their slots fall on every master).
RUNS = 12
#: Calls accepted before the master is killed, and after the cluster is whole again.
BEFORE, AFTER = 40, 20
#: A silent node is failed after this long, ms (Redis's default is 15 s).
NODE_TIMEOUT_MS = 2000
#: Bound of every wait, seconds (reached only when the test fails).
GIVE_UP_S = 90.0
STABLE = {ErrorCode.STORE_UNAVAILABLE, ErrorCode.WORKER_LOST, ErrorCode.DISPATCH_FAILED}


def _run(n: int) -> RunContext:
    return RunContext(run_id=f"cf-{n % RUNS}", authorized_tools=frozenset({"sleepy", "lookup"}))


@pytest.mark.slow
def test_a_cluster_master_failover_loses_no_accepted_call(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    # A replica may take over whatever its link's age (a test's replica synced seconds ago).
    timeout = (
        "--cluster-node-timeout",
        str(NODE_TIMEOUT_MS),
        "--cluster-replica-validity-factor",
        "0",
    )
    with (
        redis_cluster(tmp_path / "cluster", 3, 1, *timeout) as nodes,
        redis_server(tmp_path / "broker", "--appendonly", "yes") as broker,
    ):
        give_up = time.monotonic() + GIVE_UP_S
        wait_until(
            lambda: (
                sum(n.client().info("replication").get("master_link_status") == "up" for n in nodes)
                >= 3
            ),
            "the replicas to sync",
            GIVE_UP_S,
            every=0.1,
        )
        # Given a worker whose store URL names one node, the cluster setting unset
        settings = celery_test_settings(
            redis_url=nodes[0].url,
            broker_url=broker.url,
            result_backend=broker.url.replace("/0", "/1"),
            max_pending_s=8,
            reap_grace_s=1,
            reap_interval_s=1,
        )
        assert settings.redis_cluster is None and settings.store_is_cluster()
        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600, cluster=True)
        with served(settings, store, tmp_path, "cluster-fo") as serving:
            load = Load(serving.boundary, run_of=_run, call_id=lambda n: f"c{n}")
            load.start()
            load.wait_accepted(BEFORE, give_up)
            accepted = load.accepted
            # When the master holding the first run's slot is killed
            first_slot = store.client.keyslot(keys.record_key(accepted[0][1]))
            slot_node = store.client.get_node_from_key(keys.record_key(accepted[0][1]))
            victim = next(n for n in nodes if n.port == slot_node.port)
            in_flight = sum(
                1
                for _, key in list(accepted)
                if (r := store.get(key)) is not None and r.status is InvocationStatus.PROJECTING
            )
            victim.stop(signal.SIGKILL)
            killed = time.monotonic()
            # (calls of the killed master's slots are accepted again once its replica took over)
            wait_until(
                lambda: any(
                    at > killed
                    and store.client.get_node_from_key(keys.record_key(key)).port != victim.port
                    and store.client.keyslot(keys.record_key(key)) == first_slot
                    for at, key in list(accepted)
                ),
                f"a call of the killed master's slot accepted on its replica (log: {serving.log})",
                give_up - time.monotonic(),
                every=0.05,
            )
            load.wait_accepted(AFTER, give_up, after=killed, log=serving.log)
            load.stop()
            back = min(
                at
                for at, key in accepted
                if at > killed and store.client.keyslot(keys.record_key(key)) == first_slot
            )
            # Then every accepted call ends, READY or with a stable code, none lost
            outcomes = outcomes_once_ended(serving.boundary, [key for _, key in accepted], give_up)
            ends = Counter(o.error_code or o.status for o in outcomes)
            assert not any(o.pending for o in outcomes), ends
            assert set(ends) <= {InvocationStatus.READY, *STABLE}, ends
            # And the same worker serves on (no restart)
            assert serving.worker.poll() is None, serving.log_tail()
    print(
        f"cluster failover: {len(accepted)} accepted, {in_flight} PROJECTING at the kill, "
        f"ends {dict(ends)}, submits refused {dict(load.refused)}, the killed master's slots "
        f"accepted calls again {back - killed:.1f}s after the kill, worker restarts 0"
    )
