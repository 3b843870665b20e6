"""Long-running tools: what heartbeats cost, and head-of-line blocking with and without a queue
of their own (B8).

    python -m bench.studies.long_tools [--redis-url redis://127.0.0.1:6379] \\
        [--long-s 60] [--calls 50]

- Heartbeat cost (in-process steps on the real Redis, no broker): a tool that calls
  ``heartbeat()`` 1,000 times in a tight loop against the same loop without heartbeats,
  interleaved; median wall time per call of each, the difference, and the store writes per
  call (coalesced to one per ``HEARTBEAT_INTERVAL_S``).
- B8, head-of-line blocking (real worker subprocesses, threads c=8 each: one on ``long``,
  one on ``tools,projections``): the latency of a 10 ms tool on an idle system; with 8 calls
  of a ``--long-s`` tool in flight on the ``long`` queue; and, for contrast, with the same 8
  long calls on the short tool's own ``tools`` queue (every slot taken: it waits behind them).

Uses the bench's DBs (3-5) of the server, flushed before and after. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from bench.rig.workers import (
    Pool,
    WorkerProcess,
    running,
    settings_env,
    start_beat,
    stop_group,
)
from bench.suite.config import DEFAULT_REDIS_URL, OWN_DBS, bench_settings, db_url
from boundary import (
    CanonicalKey,
    EvidenceStatus,
    InProcessDispatcher,
    InvocationStatus,
    Projection,
    RedisCanonicalStore,
    RetryPolicy,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
    ToolSpec,
    heartbeat,
)
from boundary.store import WriteStatus
from tasks import CeleryDispatcher
from tasks.settings import Settings
from tasks.wiring.app import create_app

#: Iterations of the tight loop (the issue's figure: 1,000 heartbeats per call).
BEATS = 1000
#: How long the short tool works, seconds.
SHORT_S = 0.01
#: The heartbeat timeout of the tool whose worker the loss measurement kills, seconds.
LOSS_TIMEOUT_S = 5.0


class PassProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"n": 1})


def beating_loop(arguments: dict[str, Any]) -> dict[str, Any]:
    for i in range(BEATS):
        heartbeat(progress=i / BEATS, message=f"item {i}")
    return {"ok": True}


def silent_loop(arguments: dict[str, Any]) -> dict[str, Any]:
    for i in range(BEATS):
        _ = (i / BEATS, f"item {i}")
    return {"ok": True}


def short(arguments: dict[str, Any]) -> dict[str, Any]:
    time.sleep(SHORT_S)
    return {"ok": True}


def beat_often(arguments: dict[str, Any]) -> dict[str, Any]:
    """Heartbeats every ``every_s`` (default 0.5 s) for ``seconds``."""
    seconds, every = float(arguments.get("seconds", 600)), float(arguments.get("every_s", 0.5))
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        heartbeat(message="working")
        time.sleep(every)
    return {"ok": True}


def long_sleep(arguments: dict[str, Any]) -> dict[str, Any]:
    """Sleeps ``seconds``, heartbeating each second (so a cancel stops it)."""
    seconds = float(arguments.get("seconds", 60))
    started = time.monotonic()
    while (left := seconds - (time.monotonic() - started)) > 0:
        heartbeat(progress=1 - left / seconds, message="sleeping")
        time.sleep(min(left, 1.0))
    return {"ok": True}


def _spec(name: str, executor: Any, **options: Any) -> ToolSpec:
    return ToolSpec(
        name=name, executor=executor, projector=PassProjector(), read_only=True, **options
    )


#: What the B8 workers load (``TOOL_BOUNDARY_TOOLS=bench.studies.long_tools:registry``).
registry = ToolRegistry(
    [
        _spec("beating_loop", beating_loop),
        _spec("silent_loop", silent_loop),
        _spec("short", short),
        _spec("long_sleep", long_sleep, timeout_s=900, heartbeat_timeout_s=30, queue="long"),
        _spec("long_sleep_shared", long_sleep, timeout_s=900, heartbeat_timeout_s=30),
        _spec("beat_often", beat_often, timeout_s=900, heartbeat_timeout_s=LOSS_TIMEOUT_S),
        # bench.studies.kill_soak's tool: about a second of heartbeats, retried when lost.
        _spec(
            "soak",
            beat_often,
            timeout_s=20,
            heartbeat_timeout_s=3.0,
            retry=RetryPolicy(max_attempts=3, backoff_s=0.5),
        ),
    ]
)


class CountingStore(RedisCanonicalStore):
    """The real store, counting its heartbeat writes."""

    heartbeats = 0

    def heartbeat(self, key: Any, **terms: Any) -> WriteStatus:
        self.heartbeats += 1
        return super().heartbeat(key, **terms)


def _run() -> RunContext:
    return RunContext(
        run_id=f"bench-long-{uuid.uuid4().hex[:8]}",
        authorized_tools=frozenset(spec.name for spec in registry),
    )


def _envelope(run: RunContext, call_id: str, tool: str, arguments: Any = None) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=run.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments or {}
    )


def heartbeat_cost(settings: Settings, calls: int) -> dict[str, Any]:
    store = CountingStore.from_url(settings.store_url, ttl_s=600)
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry, inline=True)
    )
    run = _run()
    walls: dict[str, list[float]] = {"beating_loop": [], "silent_loop": []}
    for n in range(calls):
        for tool in walls if n % 2 == 0 else reversed(list(walls)):
            started = time.perf_counter()
            outcome = boundary.invoke(_envelope(run, f"{tool}-{n}", tool), run, timeout=30)
            walls[tool].append(time.perf_counter() - started)
            assert outcome.status is InvocationStatus.READY, outcome
    beating = statistics.median(walls["beating_loop"]) * 1000
    silent = statistics.median(walls["silent_loop"]) * 1000
    return {
        "calls_each": calls,
        "heartbeats_per_call": BEATS,
        "median_call_ms_with_heartbeats": round(beating, 3),
        "median_call_ms_without": round(silent, 3),
        "added_ms_per_call": round(beating - silent, 3),
        "added_us_per_heartbeat_call": round((beating - silent) * 1000 / BEATS, 3),
        "store_writes_per_call": store.heartbeats / calls,
    }


def _short_latency(boundary: ToolBoundary, run: RunContext, label: str, samples: int) -> float:
    walls = []
    for n in range(samples):
        started = time.perf_counter()
        outcome = boundary.invoke(_envelope(run, f"{label}-{n}", "short"), run, timeout=600)
        walls.append(time.perf_counter() - started)
        assert outcome.status is InvocationStatus.READY, outcome
    return statistics.median(walls) * 1000


def _start_long(boundary: ToolBoundary, run: RunContext, tool: str, seconds: float) -> list[str]:
    ids = [f"{tool}-{n}" for n in range(8)]
    for call_id in ids:
        envelope = _envelope(run, call_id, tool, {"seconds": seconds})
        assert boundary.submit(envelope, run).accepted
    return ids


def _await_started(boundary: ToolBoundary, run: RunContext, ids: list[str]) -> None:
    give_up = time.monotonic() + 60
    while True:
        progress = [boundary.outcome(run.run_id, i, timeout=0).progress for i in ids]
        if all(p is not None for p in progress):
            return
        if time.monotonic() > give_up:
            raise RuntimeError("the long calls did not all start")
        time.sleep(0.1)


def head_of_line(settings: Settings, long_s: float, samples: int, log_dir: Path) -> dict[str, Any]:
    app = create_app(settings, name="bench-long")
    pool = Pool("threads", 8)

    def worker(name: str, queues: tuple[str, ...]) -> WorkerProcess:
        return WorkerProcess(
            module="tasks",
            name=name,
            app=app,
            settings=settings,
            pool=pool,
            queues=queues,
            log_dir=log_dir,
        )

    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=CeleryDispatcher(app))
    with running(
        lambda: worker("long", ("long",)), lambda: worker("short", ("tools", "projections"))
    ):
        run = _run()
        _short_latency(boundary, run, "warm", 5)
        idle = _short_latency(boundary, run, "idle", samples)
        long_ids = _start_long(boundary, run, "long_sleep", long_s)
        _await_started(boundary, run, long_ids)
        own_queue = _short_latency(boundary, run, "own", samples)
        for call_id in long_ids:
            boundary.cancel(run.run_id, call_id)
        shared_ids = _start_long(boundary, run, "long_sleep_shared", long_s)
        _await_started(boundary, run, shared_ids)
        shared = _short_latency(boundary, run, "shared", 1)
        for call_id in shared_ids:
            boundary.cancel(run.run_id, call_id)
    return {
        "long_s": long_s,
        "samples": samples,
        "short_tool_ms": SHORT_S * 1000,
        "idle_median_ms": round(idle, 2),
        "own_queue_median_ms": round(own_queue, 2),
        "own_queue_over_idle": round(own_queue / idle, 3),
        "shared_queue_ms": round(shared, 1),
    }


def loss_detection(settings: Settings, samples: int, log_dir: Path) -> dict[str, Any]:
    """With the default settings (reap interval 5 s) and a real beat: SIGKILL the worker
    running a tool that heartbeats every 0.5 s (heartbeat timeout 5 s, no retries); the
    seconds from its last stored heartbeat to the reaper's seal (store clock), per sample."""
    import os
    import signal

    app = create_app(settings, name="bench-loss")
    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=CeleryDispatcher(app))
    pool = Pool("threads", 4)
    found = []
    beat = start_beat(
        settings_env(settings), log_dir / "beat-schedule", log_dir / "beat.log", level="INFO"
    )
    try:
        with running(
            lambda: WorkerProcess(
                module="tasks",
                name="reaper",
                app=app,
                settings=settings,
                pool=pool,
                queues=("projections",),
                log_dir=log_dir,
            )
        ):
            for n in range(samples):
                doomed = WorkerProcess(
                    module="tasks",
                    name=f"doomed{n}",
                    app=app,
                    settings=settings,
                    pool=pool,
                    queues=("tools",),
                    log_dir=log_dir,
                )
                doomed.await_ready()
                run = _run()
                assert boundary.submit(_envelope(run, "lost", "beat_often"), run).accepted
                key = CanonicalKey(run_id=run.run_id, tool_call_id="lost")
                give_up = time.monotonic() + 60
                while (record := store.get(key)) is None or record.heartbeat_at is None:
                    assert time.monotonic() < give_up, "the tool did not start"
                    time.sleep(0.1)
                time.sleep(1.0)
                os.killpg(doomed.pgid, signal.SIGKILL)
                doomed.proc.wait()
                while (
                    record := store.get(key)
                ) is not None and record.status is InvocationStatus.PROJECTING:
                    assert time.monotonic() < give_up + 120, "never reaped"
                    time.sleep(0.1)
                assert record is not None and record.heartbeat_at is not None
                found.append((record.updated_at - record.heartbeat_at).total_seconds())
    finally:
        stop_group(beat)
    return {
        "heartbeat_timeout_s": LOSS_TIMEOUT_S,
        "reap_interval_s": settings.reap_interval_s,
        "seconds_from_last_heartbeat_to_seal": [round(f, 2) for f in found],
        "median_s": round(statistics.median(found), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--long-s", type=float, default=60.0, help="the long tool's run time")
    parser.add_argument("--calls", type=int, default=50, help="heartbeat-cost calls per side")
    parser.add_argument("--samples", type=int, default=20, help="short calls per B8 state")
    parser.add_argument("--loss-samples", type=int, default=3, help="worker kills measured")
    parser.add_argument("--logs", default="/tmp/tool-boundary-bench-long")
    parser.add_argument("--only", default="heartbeat,b8,loss", help="parts to run")
    args = parser.parse_args(argv)
    settings = bench_settings(args.redis_url).model_copy(
        update={"tools": "bench.studies.long_tools:registry"}
    )
    clients = [redis.Redis.from_url(db_url(args.redis_url, db)) for db in OWN_DBS]
    for client in clients:
        client.flushdb()
    parts = set(args.only.split(","))
    logs = Path(args.logs)
    report: dict[str, Any] = {}
    try:
        if "heartbeat" in parts:
            report["heartbeat_cost"] = heartbeat_cost(settings, args.calls)
        if "b8" in parts:
            report["b8_head_of_line"] = head_of_line(settings, args.long_s, args.samples, logs)
        if "loss" in parts:
            report["loss_detection"] = loss_detection(settings, args.loss_samples, logs)
    finally:
        for client in clients:
            client.flushdb()
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
