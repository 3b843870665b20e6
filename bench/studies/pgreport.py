"""Figures of the PostgreSQL report tool (``examples.pgreport``): rows per second with
heartbeats between batches, and the time from ``boundary.cancel`` to the call's statement
gone from ``pg_stat_activity`` (in-process and in a real worker on the ``long`` queue).

    python -m bench.studies.pgreport --redis-url redis://127.0.0.1:6379 \\
        --pg-dsn postgresql://postgres@127.0.0.1:5432/postgres

It creates a scratch database (``--db-prefix``, dropped at the end) and uses the Redis DBs of
the benchmark (``bench.suite.config``), flushed before and after. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench.rig.workers import celery_process, settings_env, worker_args
from bench.studies import pg_tools
from bench.suite.config import BROKER_DB, DEFAULT_REDIS_URL, OWN_DBS, bench_settings, db_url
from boundary import (
    InProcessDispatcher,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
)
from examples import pgreport
from examples.pgreport_demo import create_demo_table
from tasks import CeleryDispatcher
from tasks.settings import Settings
from tasks.wiring.app import create_app

RUN = RunContext(run_id="bench-pg", authorized_tools=frozenset({"sql_report"}))
#: The throughput report: every row of the demo table, up to the cap.
SCAN = {"report": {"name": "slow_requests", "min_latency_ms": 0}, "max_rows": 5000}
#: The statement each cancel sample cancels (it would sleep this long).
SLEEP = {"report": {"name": "sleep", "seconds": 100}}


class CountingStore(RedisCanonicalStore):
    """Counts the heartbeat writes that reached the store."""

    heartbeats = 0

    def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        type(self).heartbeats += 1
        return super().heartbeat(*args, **kwargs)  # type: ignore[misc]


@contextmanager
def scratch_database(admin_dsn: str, prefix: str, rows: int) -> Iterator[str]:
    name = f"{prefix}_{os.getpid()}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)
    try:
        with psycopg.connect(dsn) as conn:
            create_demo_table(conn, rows)
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def running(admin_dsn: str, dbname: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = %s AND state = 'active'",
            (dbname, pgreport.APPLICATION_NAME),
        ).fetchone()
    return int(row[0]) if row else 0


def until(condition: Callable[[], bool], patience_s: float = 60.0) -> float:
    """Polls ``condition`` every 10 ms; the monotonic time it first held."""
    give_up = time.monotonic() + patience_s
    while not condition():
        if time.monotonic() > give_up:
            raise RuntimeError("gave up waiting")
        time.sleep(0.01)
    return time.monotonic()


def envelope(call_id: str, arguments: dict[str, Any]) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name="sql_report", arguments=arguments
    )


def throughput(store: RedisCanonicalStore, registry: ToolRegistry, repeats: int) -> dict:
    """Rows per second of a 5,000-row report: outside a tool (heartbeats do nothing), and
    through the boundary (heartbeats stored, coalesced to one write per interval)."""
    direct, called = [], []
    for i in range(repeats):
        started = time.perf_counter()
        rows = len(pgreport.run_report(SCAN, pg_tools.ALL_REPORTS)["rows"])
        direct.append(rows / (time.perf_counter() - started))
        boundary = ToolBoundary(
            store=store,
            registry=registry,
            dispatcher=InProcessDispatcher(store, registry, inline=True),
        )
        started = time.perf_counter()
        outcome = boundary.invoke(envelope(f"scan{i}", SCAN), RUN, timeout=60)
        assert outcome.result is not None and outcome.result["more_rows"], outcome
        called.append(rows / (time.perf_counter() - started))
    return {
        "rows": SCAN["max_rows"],
        "batch_rows": pgreport.BATCH_ROWS,
        "direct_rows_per_s_median": round(statistics.median(direct)),
        "boundary_call_rows_per_s_median": round(statistics.median(called)),
        "heartbeat_writes": CountingStore.heartbeats,
    }


def cancel_times(boundary: ToolBoundary, admin_dsn: str, dbname: str, tag: str, n: int) -> dict:
    """Seconds from ``cancel()`` to the statement gone from pg_stat_activity, ``n`` times,
    each cancel 1.5-2.5 s after the statement started."""
    samples = []
    for i in range(n):
        call_id = f"{tag}{i}"
        assert boundary.submit(envelope(call_id, SLEEP), RUN).accepted
        until(lambda: running(admin_dsn, dbname) > 0)
        # At a random phase of the heartbeat interval: a cancel is seen at the next write.
        time.sleep(random.uniform(1.5, 2.5))
        cancelled_at = time.monotonic()
        outcome = boundary.cancel(RUN.run_id, call_id)
        assert outcome.error_code == "CANCELLED", outcome
        samples.append(until(lambda: running(admin_dsn, dbname) == 0) - cancelled_at)
    return {
        "samples_s": [round(s, 3) for s in samples],
        "median_s": round(statistics.median(samples), 3),
    }


@contextmanager
def worker(settings: Settings, dsn: str, log: Path) -> Iterator[None]:
    """A threads worker (-c 4) on ``long`` and ``projections`` of ``settings``, the report
    tool's database at ``dsn``, until the block ends."""
    args = worker_args("threads", 4, ("long", "projections"), node="pgbench@%h")
    env = settings_env(settings) | {pgreport.DSN_ENV: dsn}
    with celery_process(env, *args, log=log, timeout_s=60):
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--pg-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--db-prefix", default="tb_bench")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--log", type=Path, default=Path("/tmp/pgreport-bench-worker.log"))
    args = parser.parse_args(argv)
    settings = bench_settings(args.redis_url).model_copy(
        update={"tools": "bench.studies.pg_tools:registry", "visibility_timeout_s": 600}
    )
    for db in OWN_DBS:
        redis.Redis.from_url(db_url(args.redis_url, db)).flushdb()
    store = CountingStore.from_url(settings.redis_url, ttl_s=600)
    result: dict[str, Any] = {}
    with scratch_database(args.pg_dsn, args.db_prefix, args.rows) as dsn:
        os.environ[pgreport.DSN_ENV] = dsn
        dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        registry = pg_tools.registry
        result["throughput"] = throughput(store, registry, args.repeats)
        in_process = ToolBoundary(
            store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
        )
        result["cancel_in_process"] = cancel_times(
            in_process, args.pg_dsn, str(dbname), "ci", args.repeats
        )
        app = create_app(
            settings.model_copy(update={"broker_url": db_url(args.redis_url, BROKER_DB)})
        )
        with worker(settings, dsn, args.log):
            celery = ToolBoundary(store=store, registry=registry, dispatcher=CeleryDispatcher(app))
            result["cancel_worker"] = cancel_times(
                celery, args.pg_dsn, str(dbname), "cw", args.repeats
            )
    for db in OWN_DBS:
        redis.Redis.from_url(db_url(args.redis_url, db)).flushdb()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
