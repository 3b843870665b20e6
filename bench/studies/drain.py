"""Drain timing: a worker told to stop (SIGTERM) while it runs 8 long calls.

Two figures per run, for the threads and the prefork pool:

- ``exit_s``: from SIGTERM to the worker's exit (its drain time, ``--drain-s``, then the
  hand-back of the calls still running, then Celery's shutdown);
- ``restart_s``: from SIGTERM to each handed-back call's next attempt starting on the other
  worker (already running, as in a rolling deploy that starts the new worker first), read
  from the record's ``started_at`` (the store's clock).

``python -m bench.studies.drain --redis-url redis://127.0.0.1:6379 [--runs 3]
[--drain-s 20] [--json]``. It flushes the bench's DBs of that server first: give it a Redis of
its own. Prints the median and the max over the runs (each run's 8 calls pooled for
``restart_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import redis

from bench.rig.workers import (
    await_log,
    celery_command,
    settings_env,
    start_process,
    stop_group,
    worker_args,
)
from bench.suite.config import bench_settings
from boundary import CanonicalKey, RunContext, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import configure

#: Long calls running when the worker is told to stop.
CALLS = 8
TOOL = "beat_often"
#: Longest a worker may take to start or stop here (only a hung one reaches it), seconds.
PATIENCE_S = 120


def _flush(settings: Settings) -> None:
    for url in (settings.redis_url, settings.broker_url, settings.result_backend):
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()


def _record(key: CanonicalKey) -> Any:
    return get_runtime().store.get(key, with_raw=False)


def _wait(condition: Any, what: str) -> None:
    give_up = time.monotonic() + PATIENCE_S
    while not condition():
        if time.monotonic() > give_up:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def one_run(settings: Settings, pool: str, drain_s: float, logs: Path, n: int) -> dict[str, Any]:
    _flush(settings)
    env = settings_env(settings) | {"TOOL_BOUNDARY_WORKER_DRAIN_S": str(drain_s)}
    queues = ("tools", "projections")
    old = start_process(
        celery_command("tasks", *worker_args(pool, CALLS, queues, node=f"old{n}@%h")),
        env,
        logs / f"old-{pool}-{n}.log",
    )
    new = None
    try:
        await_log(old, logs / f"old-{pool}-{n}.log", " ready.", PATIENCE_S, "old worker")
        app = configure(settings)
        boundary = get_runtime().boundary(CeleryDispatcher(app))
        run_id = f"drain-{pool}-{n}"
        run = RunContext(run_id=run_id, authorized_tools=frozenset({TOOL}))
        keys = [CanonicalKey(run_id=run_id, tool_call_id=f"long-{i}") for i in range(CALLS)]
        for key in keys:
            envelope = ToolCallEnvelope(
                run_id=run_id,
                tool_call_id=key.tool_call_id,
                tool_name=TOOL,
                arguments={"seconds": 600, "every_s": 0.2},
            )
            assert boundary.submit(envelope, run).accepted
        for key in keys:
            _wait(lambda key=key: _record(key).started_at is not None, "the calls to start")
        # The replacement first (a rolling deploy's surge), then SIGTERM to the old worker.
        new = start_process(
            celery_command("tasks", *worker_args(pool, CALLS, queues, node=f"new{n}@%h")),
            env,
            logs / f"new-{pool}-{n}.log",
        )
        await_log(new, logs / f"new-{pool}-{n}.log", " ready.", PATIENCE_S, "new worker")
        sent_at = time.time()
        told = time.monotonic()
        os.kill(old.pid, signal.SIGTERM)
        while old.poll() is None:
            time.sleep(0.005)
        exit_s = time.monotonic() - told
        restarts = []
        for key in keys:
            _wait(
                lambda key=key: (r := _record(key)).attempt == 2 and r.started_at is not None,
                "the next attempts to start",
            )
            restarts.append(_record(key).started_at.timestamp() - sent_at)
        return {"pool": pool, "run": n, "exit_s": exit_s, "restart_s": restarts}
    finally:
        stop_group(old)
        if new is not None:
            stop_group(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drain-s", type=float, default=20.0)
    parser.add_argument("--pools", default="threads,prefork")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    settings = bench_settings(args.redis_url).model_copy(
        update={"tools": "bench.studies.long_tools:registry"}
    )
    results: dict[str, Any] = {}
    with TemporaryDirectory() as logs:
        for pool in args.pools.split(","):
            runs = [one_run(settings, pool, args.drain_s, Path(logs), n) for n in range(args.runs)]
            exits = [r["exit_s"] for r in runs]
            restarts = [s for r in runs for s in r["restart_s"]]
            results[pool] = {
                "drain_s": args.drain_s,
                "runs": args.runs,
                "calls": CALLS,
                "exit_s": {"median": statistics.median(exits), "max": max(exits)},
                "restart_s": {"median": statistics.median(restarts), "max": max(restarts)},
                "raw": runs,
            }
    _flush(settings)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for pool, figures in results.items():
        print(
            f"{pool}: SIGTERM -> exit median {figures['exit_s']['median']:.2f}s"
            f" max {figures['exit_s']['max']:.2f}s; SIGTERM -> next attempt started"
            f" median {figures['restart_s']['median']:.2f}s max {figures['restart_s']['max']:.2f}s"
            f" (drain {figures['drain_s']:g}s, {figures['calls']} calls, {figures['runs']} runs)"
        )


if __name__ == "__main__":
    main()
