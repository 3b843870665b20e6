"""A long tool polled over MCP Tasks across a server restart.

``python -m bench.studies.mcp_restart [--redis-url URL] [--seconds 10] [--repetitions 3]
[--poll-ms 250] [--json]``

Starts a real worker and a ``tool-boundary mcp --transport http`` server, opens a run, and for
each repetition makes two task-augmented calls of a tool that sleeps ``--seconds``:

* steady: the task is polled on the same server until ``completed``;
* restart: two seconds in, the server is SIGKILLed and started again on the same port; the
  client polls the new process until ``completed``.

Each poll honours the server's ``pollIntervalMs`` (``--poll-ms``). Reported per call: the time
from the record's seal (its ``updated_at``, written by the worker) to the client seeing
``completed``; and for the restart, the time from SIGKILL until the new process answers
``tasks/get``. Uses the benchmark's own DBs (3, 4, 5) and flushes them at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from bench.rig.mcp_server import HttpServer, free_port
from bench.rig.workers import Pool, WorkerProcess, running, settings_env
from bench.studies.mcp_tools import SLEEP
from bench.suite.config import DEFAULT_REDIS_URL, OWN_DBS, bench_settings, db_url
from boundary import CanonicalKey, RedisCanonicalStore, RunContext
from tasks.mcp_server.client import DetailedTask, TaskHandle, TasksExtension, get_task
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tasks.wiring.app import create_app

RUN_ID = "bench-mcp"
#: tasks/get's answer for an unknown task.
INVALID_PARAMS = -32602


@dataclass
class Figures:
    steady_s: list[float] = field(default_factory=list)
    across_restart_s: list[float] = field(default_factory=list)
    restart_s: list[float] = field(default_factory=list)


async def start_task(url: str, call_id: str, seconds: float) -> TaskHandle:
    async with Client(streamable_http_client(url), extensions=[TasksExtension()]) as client:
        meta = {RUN_ID_META: RUN_ID, TOOL_CALL_ID_META: call_id}
        handle = await client.session.call_tool(
            SLEEP, {"seconds": seconds}, meta=meta, allow_claimed=True
        )
    assert isinstance(handle, TaskHandle), handle
    return handle


async def poll_until_answered(url: str, task_id: str, timeout_s: float = 60.0) -> float:
    """Seconds until a server at ``url`` answers ``tasks/get`` (it may still be starting)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            async with Client(streamable_http_client(url), extensions=[TasksExtension()]) as client:
                try:
                    await get_task(client.session, task_id)
                except MCPError as exc:
                    if exc.code != INVALID_PARAMS:  # else answered: no such task (a probe)
                        raise
                return time.monotonic() - started
        except (OSError, MCPError, httpx2.HTTPError, ExceptionGroup):
            await anyio.sleep(0.02)
    raise TimeoutError("the restarted server never answered")


async def seen_completed(url: str, task_id: str) -> tuple[DetailedTask, float]:
    """Polls at the server's suggested interval; returns the task and when it was seen."""
    async with Client(streamable_http_client(url), extensions=[TasksExtension()]) as client:
        while True:
            task = await get_task(client.session, task_id)
            if task.terminal:
                return task, time.time()
            await anyio.sleep((task.poll_interval_ms or 500) / 1000)


def sealed_at(store: RedisCanonicalStore, call_id: str) -> float:
    record = store.get(CanonicalKey(run_id=RUN_ID, tool_call_id=call_id), with_raw=False)
    assert record is not None and record.status.value == "READY", record
    return record.updated_at.timestamp()


def one_call(
    server: HttpServer, store: RedisCanonicalStore, call_id: str, seconds: float, restart: bool
) -> tuple[float, float | None]:
    handle = anyio.run(start_task, server.url, call_id, seconds)
    restart_s = None
    if restart:
        time.sleep(min(2.0, seconds / 2))
        killed = time.monotonic()
        server.kill()
        server.launch()
        anyio.run(poll_until_answered, server.url, handle.task_id)
        restart_s = time.monotonic() - killed
    task, seen = anyio.run(seen_completed, server.url, handle.task_id)
    assert task.status == "completed", task
    return seen - sealed_at(store, call_id), restart_s


def measure(args: argparse.Namespace) -> dict[str, Any]:
    settings = bench_settings(args.redis_url).model_copy(
        update={"tools": "bench.studies.mcp_tools:registry"}
    )
    for db in OWN_DBS:
        redis.Redis.from_url(db_url(args.redis_url, db)).flushdb()
    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=settings.ttl_s)
    store.open_run(RunContext(run_id=RUN_ID, authorized_tools=frozenset({SLEEP})))
    env = settings_env(settings) | {"TOOL_BOUNDARY_MCP_POLL_INTERVAL_MS": str(args.poll_ms)}
    logs = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    server = HttpServer(port=free_port(), log=logs / "server.log", env=env)
    figures = Figures()

    def worker() -> WorkerProcess:
        return WorkerProcess(
            module="tasks",
            name="mcp-bench",
            app=create_app(settings, name="bench_mcp_client"),
            settings=settings,
            pool=Pool("threads", 4),
            queues=("tools", "projections"),
            log_dir=logs,
        )

    try:
        with running(worker):
            server.launch()
            anyio.run(poll_until_answered, server.url, f"{RUN_ID}:warm-up")
            for n in range(args.repetitions):
                steady, _ = one_call(server, store, f"steady-{n}", args.seconds, restart=False)
                across, restart_s = one_call(
                    server, store, f"restart-{n}", args.seconds, restart=True
                )
                figures.steady_s.append(steady)
                figures.across_restart_s.append(across)
                figures.restart_s.append(restart_s or 0.0)
                print(
                    f"rep {n + 1}: sealed->completed seen {steady:.3f}s steady, {across:.3f}s "
                    f"across a restart; restart (SIGKILL to tasks/get answered) {restart_s:.2f}s",
                    file=sys.stderr,
                )
    finally:
        server.stop(timeout_s=15)
        for db in OWN_DBS:
            redis.Redis.from_url(db_url(args.redis_url, db)).flushdb()
    return {
        "tool_seconds": args.seconds,
        "poll_interval_ms": args.poll_ms,
        "repetitions": args.repetitions,
        "sealed_to_seen_s": {
            "steady_median": statistics.median(figures.steady_s),
            "steady_max": max(figures.steady_s),
            "across_restart_median": statistics.median(figures.across_restart_s),
            "across_restart_max": max(figures.across_restart_s),
        },
        "restart_s": {
            "median": statistics.median(figures.restart_s),
            "max": max(figures.restart_s),
        },
        "raw": {
            "steady_s": figures.steady_s,
            "across_restart_s": figures.across_restart_s,
            "restart_s": figures.restart_s,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.studies.mcp_restart", description=__doc__
    )
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="Redis server (no DB)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the tool runs")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--poll-ms", type=int, default=250, help="the server's pollIntervalMs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        seen, restart = figures["sealed_to_seen_s"], figures["restart_s"]
        print(
            f"{args.seconds:.0f} s tool, pollIntervalMs {args.poll_ms}, "
            f"{args.repetitions} repetitions:\n"
            f"  sealed -> completed seen: median {seen['steady_median']:.3f} s steady, "
            f"{seen['across_restart_median']:.3f} s across a restart "
            f"(max {seen['steady_max']:.3f} / {seen['across_restart_max']:.3f})\n"
            f"  restart (SIGKILL -> tasks/get answered): median {restart['median']:.2f} s, "
            f"max {restart['max']:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
