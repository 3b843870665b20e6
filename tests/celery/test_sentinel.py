"""Redis Sentinel: store, broker and result backend behind one ``redis+sentinel://`` syntax,
on a master, a replica and three Sentinels of the test's own. The master is killed while calls
run: every accepted call ends (READY or a stable code, none PROJECTING), the worker that was
running them is the one that serves the calls after the failover, and new calls are accepted
again once the Sentinels promoted the replica."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import (
    CanonicalKey,
    ErrorCode,
    InvocationStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks import CeleryDispatcher
from tasks.app import create_app
from tasks.runtime import get_runtime
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import celery_test_settings
from tests.sentinel_servers import sentinel_setup

#: Calls accepted before the master is killed.
BEFORE = 40
#: Calls accepted after the failover before the load stops.
AFTER = 20
#: Each call's tool run, seconds.
TOOL_S = 0.3
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
        boundary = ToolBoundary(
            store=store,
            registry=get_runtime().registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="tests_sentinel")),
            max_pending_s=settings.max_pending_s,
            reap_grace_s=settings.reap_grace_s,
        )
        log = tmp_path / "w.log"
        args = (*worker_args("sentinel", concurrency=8), "-B", "-s", str(tmp_path / "beat"))
        with celery_process(settings, *args, log=log) as worker:
            pid = worker.pid
            accepted: list[tuple[float, str]] = []
            refused: Counter[ErrorCode | None] = Counter()
            stop = threading.Event()

            def load() -> None:
                n = 0
                while not stop.is_set():
                    call_id = f"s{n}"
                    n += 1
                    envelope = ToolCallEnvelope(
                        run_id=RUN.run_id,
                        tool_call_id=call_id,
                        tool_name="sleepy",
                        arguments={"seconds": TOOL_S, "n": n},
                    )
                    submission = boundary.submit(envelope, RUN)
                    if submission.accepted:
                        accepted.append((time.monotonic(), call_id))
                    else:
                        assert submission.outcome is not None
                        refused[submission.outcome.error_code] += 1
                        time.sleep(0.05)
                    time.sleep(0.02)

            # Given calls running through the Sentinel-managed master
            loader = threading.Thread(target=load, daemon=True)
            loader.start()
            give_up = time.monotonic() + GIVE_UP_S
            while len(accepted) < BEFORE:
                assert time.monotonic() < give_up, refused
                time.sleep(0.05)
            in_flight = sum(
                1
                for _, call_id in list(accepted)
                if (r := store.get(_key(call_id))) is not None
                and r.status is InvocationStatus.PROJECTING
            )
            old_master = setup.master.port
            # When the master is killed
            setup.master.stop(signal.SIGKILL)
            killed = time.monotonic()
            while sum(1 for at, _ in list(accepted) if at > killed) < AFTER:
                assert time.monotonic() < give_up, (refused, log.read_text()[-2000:])
                time.sleep(0.05)
            stop.set()
            loader.join(timeout=30)
            first_after = min(at for at, _ in accepted if at > killed)
            assert setup.master_port() != old_master
            # Then every accepted call ends, READY or with a stable code
            ids = [call_id for _, call_id in accepted]
            while True:
                outcomes = [boundary.outcome(RUN.run_id, i, timeout=0.05) for i in ids]
                if not any(o.pending for o in outcomes) or time.monotonic() > give_up:
                    break
                time.sleep(0.5)
            ends = Counter(o.error_code or o.status for o in outcomes)
            assert not any(o.pending for o in outcomes), ends
            assert set(ends) <= {InvocationStatus.READY, *STABLE}, ends
            # And the worker that ran them is still the one serving (no restart)
            assert worker.poll() is None and worker.pid == pid, log.read_text()[-3000:]
            after = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="after",
                tool_name="lookup",
                arguments={"query": "x"},
            )
            assert boundary.invoke(after, RUN, timeout=60).status is InvocationStatus.READY
    print(
        f"sentinel failover, WAIT {wait_replicas}: {len(ids)} accepted, "
        f"{in_flight} PROJECTING at the kill, "
        f"ends {dict(ends)}, submits refused {dict(refused)}, new calls accepted again "
        f"{first_after - killed:.1f}s after the kill, worker restarts 0"
    )


def _key(call_id: str) -> CanonicalKey:
    return CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)
