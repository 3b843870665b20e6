"""Redis Sentinel: store, broker and result backend behind one ``redis+sentinel://`` syntax,
on a master, a replica and three Sentinels of the test's own. The master is killed while calls
run: every accepted call ends (READY or a stable code, none PROJECTING), the worker that was
running them is the one that serves the calls after the failover, and new calls are accepted
again once the Sentinels promoted the replica."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import ErrorCode, InvocationStatus, RedisCanonicalStore, ToolCallEnvelope
from tests.celery.conftest import RUN
from tests.celery.failover import Load, outcomes_once_ended, served
from tests.conftest import celery_test_settings
from tests.support.sentinel_servers import sentinel_setup

#: Calls accepted before the master is killed.
BEFORE = 40
#: Calls accepted after the failover before the load stops.
AFTER = 20
#: Bound of every wait, seconds (reached only when the test fails).
GIVE_UP_S = 120.0
#: The codes a call may end with when its Redis failed over under it.
STABLE = {
    ErrorCode.STORE_UNAVAILABLE,
    ErrorCode.WORKER_LOST,
    ErrorCode.DISPATCH_FAILED,
    ErrorCode.RECORD_NOT_FOUND,
}


@pytest.mark.slow
@pytest.mark.parametrize("wait_replicas", [0, 1])
def test_calls_survive_a_sentinel_failover_and_the_worker_stays_up(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path, wait_replicas: int
) -> None:
    with sentinel_setup(tmp_path / "sentinel") as setup:
        settings = celery_test_settings(
            redis_url=setup.url(2),
            broker_url=setup.url(0),
            result_backend=setup.url(1),
            max_pending_s=8,
            reap_grace_s=1,
            reap_interval_s=1,
            redis_wait_replicas=wait_replicas,
        )
        store = RedisCanonicalStore.from_url(
            settings.store_url, ttl_s=600, wait_replicas=wait_replicas
        )
        with served(settings, store, tmp_path, "sentinel") as serving:
            load = Load(serving.boundary, run_of=lambda n: RUN, call_id=lambda n: f"s{n}")
            # Given calls running through the Sentinel-managed master
            load.start()
            give_up = time.monotonic() + GIVE_UP_S
            load.wait_accepted(BEFORE, give_up)
            in_flight = sum(
                1
                for _, key in list(load.accepted)
                if (r := store.get(key)) is not None and r.status is InvocationStatus.PROJECTING
            )
            master = setup.master()
            old_master = master.port
            # When the master is killed
            master.kill()
            killed = time.monotonic()
            load.wait_accepted(AFTER, give_up, after=killed, log=serving.log)
            load.stop()
            first_after = min(at for at, _ in load.accepted if at > killed)
            assert setup.master_port() != old_master
            # Then every accepted call ends, READY or with a stable code
            calls = [key for _, key in load.accepted]
            outcomes = outcomes_once_ended(serving.boundary, calls, give_up)
            ends = Counter(o.error_code or o.status for o in outcomes)
            assert not any(o.pending for o in outcomes), ends
            assert set(ends) <= {InvocationStatus.READY, *STABLE}, ends
            # And the worker that ran them is still the one serving (no restart)
            assert serving.worker.poll() is None, serving.log_tail()
            after = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="after",
                tool_name="lookup",
                arguments={"query": "x"},
            )
            outcome = serving.boundary.invoke(after, RUN, timeout=60)
            assert outcome.status is InvocationStatus.READY
    print(
        f"sentinel failover, WAIT {wait_replicas}: {len(calls)} accepted, "
        f"{in_flight} PROJECTING at the kill, "
        f"ends {dict(ends)}, submits refused {dict(load.refused)}, new calls accepted again "
        f"{first_after - killed:.1f}s after the kill, worker restarts 0"
    )
