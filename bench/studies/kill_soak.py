"""Calls through workers that keep being SIGKILLed: every accepted call must end (READY, or
ERROR with a stable code), none may stay PROJECTING, and each is counted once.

    python -m bench.studies.kill_soak [--redis-url redis://127.0.0.1:6379] [--calls 300] [--kills 8]

Two threads workers (c=4) on ``tools,projections`` and beat (the reaper, every second here);
the tool heartbeats (timeout 3 s) for about a second and its policy allows 3 attempts. While
the calls run, a worker is killed (``kill -9`` of its whole process group) every few seconds
and started again. Reported: how the calls ended, how many were retried or re-sent (their
message never reached a tool), the largest attempt, and the seconds until the last one
ended. ``MAX_PENDING_S`` is 60 s (above the queue wait of 300 one-second calls on 8 slots)
so a message lost with a killed worker is found (and sent again by the reaper) within the
run; the broker's own redelivery (``VISIBILITY_TIMEOUT_S``, above the longest tool's limit)
comes too late to matter here. Uses the bench's DBs (3-5), flushed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from bench.rig.workers import Pool, WorkerProcess, settings_env, start_beat, stop_group
from bench.suite.config import DEFAULT_REDIS_URL, OWN_DBS, bench_settings, db_url
from boundary import (
    CanonicalKey,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.store import keys
from tasks import CeleryDispatcher
from tasks.wiring.app import create_app

TOOL = "soak"


def soak_calls(settings: Any, calls: int, kills: int, log_dir: Path) -> dict[str, Any]:
    app = create_app(settings, name="bench-soak")
    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
    boundary = ToolBoundary(
        store=store,
        registry=_registry(),
        dispatcher=CeleryDispatcher(app),
        max_pending_s=settings.max_pending_s,
        reap_grace_s=settings.reap_grace_s,
    )
    pool = Pool("threads", 4)

    def worker(n: int) -> WorkerProcess:
        return WorkerProcess(
            module="tasks",
            name=f"soak{n}",
            app=app,
            settings=settings,
            pool=pool,
            queues=("tools", "projections"),
            log_dir=log_dir,
        )

    beat = start_beat(settings_env(settings), log_dir / "soak-beat", log_dir / "soak-beat.log")
    workers = [worker(0), worker(1)]
    started = time.monotonic()
    try:
        for w in workers:
            w.await_ready()
        run = RunContext(run_id=f"soak-{uuid.uuid4().hex[:8]}", authorized_tools=frozenset({TOOL}))
        ids = [f"c{n}" for n in range(calls)]
        for call_id in ids:
            envelope = ToolCallEnvelope(
                run_id=run.run_id,
                tool_call_id=call_id,
                tool_name=TOOL,
                arguments={"seconds": 1.0, "every_s": 0.2},
            )
            assert boundary.submit(envelope, run).accepted
        spawned = len(workers)
        for _ in range(kills):
            time.sleep(random.uniform(2.0, 4.0))
            victim = random.randrange(len(workers))
            os.killpg(workers[victim].pgid, signal.SIGKILL)
            workers[victim].proc.wait()
            workers[victim] = worker(spawned)
            spawned += 1
            workers[victim].await_ready()
        give_up = time.monotonic() + 300
        while True:
            records = [store.get(CanonicalKey(run_id=run.run_id, tool_call_id=i)) for i in ids]
            if all(r is not None and r.status is not InvocationStatus.PROJECTING for r in records):
                break
            if time.monotonic() > give_up:
                break
            time.sleep(1.0)
        settled_s = time.monotonic() - started
        client = redis.Redis.from_url(settings.store_url, decode_responses=True)
        counters = [
            client.hmget(
                keys.record_key(CanonicalKey(run_id=run.run_id, tool_call_id=i)),
                ["retries", "redispatches", "restarts"],
            )
            for i in ids
        ]
        budget = client.hget(keys.budget_key(run.run_id), "calls")
        progress = client.zcard(keys.progress_key(run.run_id))
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.stop()
        stop_group(beat)
    ended = Counter(
        "missing" if r is None else (r.error_code.value if r.error_code else r.status.value)
        for r in records
    )
    return {
        "calls": calls,
        "kills": kills,
        "ended": dict(ended),
        "stuck_projecting": ended.get("PROJECTING", 0),
        "retried_calls": sum(1 for c in counters if c[0]),
        "redispatched_calls": sum(1 for c in counters if c[1]),
        "restarted_calls": sum(1 for c in counters if c[2]),
        "max_attempt": max((r.attempt for r in records if r is not None), default=0),
        "budget_calls": int(budget or 0),
        "indexed_once": progress,
        "seconds_until_all_ended": round(settled_s, 1),
    }


def _registry() -> Any:
    from bench.studies.long_tools import registry

    return registry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument(
        "--max-pending-s",
        type=float,
        default=60.0,
        help="MAX_PENDING_S: keep it above the calls' queue wait, or queued calls are re-sent",
    )
    parser.add_argument("--logs", default="/tmp/tool-boundary-bench-soak")
    args = parser.parse_args(argv)
    settings = bench_settings(args.redis_url).model_copy(
        update={
            "tools": "bench.studies.long_tools:registry",
            "max_pending_s": args.max_pending_s,
            "reap_grace_s": 1.0,
            "reap_interval_s": 1.0,
            "visibility_timeout_s": 1000,
            "restore_sweep_s": 2,
        }
    )
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    clients = [redis.Redis.from_url(db_url(args.redis_url, db)) for db in OWN_DBS]
    for client in clients:
        client.flushdb()
    try:
        report = soak_calls(settings, args.calls, args.kills, logs)
    finally:
        for client in clients:
            client.flushdb()
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0 if report["stuck_projecting"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
