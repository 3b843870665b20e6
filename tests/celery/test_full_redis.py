"""One Redis as store, broker and result backend, with a small ``maxmemory`` (noeviction),
filled by calls: past the memory watermark new calls are refused with STORE_UNAVAILABLE, the
calls already accepted all finish (none left PROJECTING) and the worker keeps serving."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import (
    ErrorCode,
    InvocationStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import celery_test_settings
from tests.support.helpers import wait_until
from tests.support.servers import redis_server

#: The Redis's maxmemory, bytes.
MAXMEMORY = 64 * 1024 * 1024
#: Query of each call, characters: ``lookup`` answers it three times (its request and raw
#: response fill the Redis, about 24 KB a call).
QUERY_CHARS = 6_000
#: What the Redis holds before the calls come, as a fraction of maxmemory (other data).
FILLED = 0.75
#: Calls submitted per wave; the test waits for each wave to settle.
WAVE = 20
#: Bound of the fill, in waves (reached only when nothing is ever refused).
MAX_WAVES = 200
#: Bound of every wait, seconds (reached only when the test fails).
GIVE_UP_S = 60.0


def _settle(boundary: ToolBoundary, ids: list[str]) -> list[ToolOutcome]:
    def ended() -> tuple[list[ToolOutcome]] | None:
        # (a tuple: a wave whose calls were all refused settles at once, with no outcome)
        outcomes = [boundary.outcome(RUN.run_id, i, timeout=0.05) for i in ids]
        return None if any(o.pending for o in outcomes) else (outcomes,)

    settled: tuple[list[ToolOutcome]] = wait_until(ended, "every call to end", GIVE_UP_S, every=0.2)
    return settled[0]


@pytest.mark.slow
def test_a_full_redis_refuses_new_calls_and_finishes_the_accepted_ones(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    with redis_server(
        tmp_path / "full", "--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction"
    ) as server:
        settings = celery_test_settings(
            redis_url=server.url.replace("/0", "/2"),
            broker_url=server.url,
            result_backend=server.url.replace("/0", "/1"),
        )
        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
        boundary = ToolBoundary(
            store=store,
            registry=get_runtime().registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="tests_full")),
        )
        filler = server.client(db=3)
        for n in range(int(MAXMEMORY * FILLED) // 2**20):
            filler.set(f"filler-{n}", "f" * 1_000_000)  # a 1 MiB allocation
        log = tmp_path / "w.log"
        with celery_process(settings, *worker_args("full", concurrency=8), log=log) as worker:
            # Given calls that fill the Redis, wave after wave
            accepted: list[str] = []
            refused: Counter[ErrorCode | None] = Counter()
            for wave in range(MAX_WAVES):
                ids = []
                for n in range(WAVE):
                    call_id = f"w{wave}-{n}"
                    envelope = ToolCallEnvelope(
                        run_id=RUN.run_id,
                        tool_call_id=call_id,
                        tool_name="lookup",
                        arguments={"query": "q" * QUERY_CHARS},
                    )
                    submission = boundary.submit(envelope, RUN)
                    if submission.accepted:
                        ids.append(call_id)
                    else:
                        assert submission.outcome is not None
                        refused[submission.outcome.error_code] += 1
                accepted += ids
                _settle(boundary, ids)
                if refused:
                    break
            used = server.client().info("memory")["used_memory"]
            # (and Redis never had to refuse a command for memory: the broker's messages, the
            # results and every accepted call's writes found room)
            oom = server.client().info("errorstats").get("errorstat_OOM")
            # When the Redis is past its watermark, new calls are refused with a stable code
            assert set(refused) == {ErrorCode.STORE_UNAVAILABLE}, refused
            # Then every accepted call has ended (none PROJECTING), the worker is alive
            outcomes = _settle(boundary, accepted)
            ends = Counter(o.error_code or o.status for o in outcomes)
            assert ends == {InvocationStatus.READY: len(accepted)}, ends
            assert worker.poll() is None, log.read_text()[-3000:]
            assert oom is None, oom
            # And once there is room again (the test drops the records), calls are accepted
            server.client(db=2).flushdb()
            after = ToolCallEnvelope(
                run_id=RUN.run_id,
                tool_call_id="after",
                tool_name="lookup",
                arguments={"query": "x"},
            )
            wait_until(
                lambda: boundary.submit(after, RUN).accepted,
                "a call accepted once there is room",
                GIVE_UP_S,
                every=0.2,
            )
            outcome = boundary.outcome(RUN.run_id, "after", timeout=30)
            assert outcome.status is InvocationStatus.READY
            assert worker.poll() is None
    print(
        f"full Redis: {len(accepted)} accepted ({dict(ends)}), {sum(refused.values())} refused "
        f"at {used / MAXMEMORY:.0%} of maxmemory"
    )
