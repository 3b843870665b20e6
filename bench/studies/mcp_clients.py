"""MCP as the clients people run see it: 2025-11-25 Tasks, progress, cancellation.

``python -m bench.studies.mcp_clients [--redis-url URL] [--long-seconds 75]
[--client-timeout-ms 5000] [--repetitions 5] [--ts-dir DIR]
[--only keepalive,task,cancel,restart] [--json]``

Starts a real worker (threads pool) and ``tool-boundary mcp`` servers, opens a run, and measures:

* keepalive: a ``--long-seconds`` tool through a plain ``tools/call`` from the TypeScript SDK
  (``@modelcontextprotocol/sdk``, stdio) with a ``--client-timeout-ms`` request timeout and
  ``resetTimeoutOnProgress``; the server's default progress setting (5 s). Needs node and
  ``--ts-dir``, a directory where the SDK is installed (``npm install`` of
  ``tests/mcp/ts/package.json``) holding ``tests/mcp/ts/client.mjs``;
* task: a task-augmented call of a 0 s tool through the TypeScript SDK's ``callToolStream``:
  request to ``CreateTaskResult``, and request to the result (the SDK polls ``tasks/get`` at the
  server's ``pollInterval``, then ``tasks/result``);
* cancel: ``tasks/cancel`` of a running task whose tool heartbeats every 0.2 s (Python SDK
  client on 2025-11-25, HTTP): cancel sent to answered (``cancelled``), and to the tool stopped
  (the time the tool wrote on its way out);
* restart: a 10 s task; two seconds in the server is SIGKILLed and started again on its port;
  ``tasks/result`` on the new process waits and answers the result: the time from the record's
  seal to the answer, and from SIGKILL to the new process answering.

Uses the benchmark's own DBs (3, 4, 5) of ``--redis-url`` and flushes them at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.rig.mcp_server import ROOT, HttpServer, free_port, server_command
from bench.rig.workers import Pool, WorkerProcess, running, settings_env
from bench.studies.mcp_tools import BEAT, SLEEP
from bench.suite.config import DEFAULT_REDIS_URL, OWN_DBS, bench_settings, db_url
from boundary import CanonicalKey, RedisCanonicalStore, RunContext
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tasks.wiring.app import create_app

RUN_ID = "bench-mcp-clients"
PARTS = ("keepalive", "task", "cancel", "restart")


def meta(call_id: str) -> dict[str, Any]:
    return {RUN_ID_META: RUN_ID, TOOL_CALL_ID_META: call_id}


async def send(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One request on a fresh 2025-11-25 connection (the SDK client's dispatcher)."""
    async with Client(streamable_http_client(url), mode="legacy") as client:
        answer: dict[str, Any] = await client.session._dispatcher.send_raw_request(
            method, params, None
        )
        return answer


def ts_run(ts_dir: Path, env: dict[str, str], scenario: str, **options: Any) -> dict[str, Any]:
    env = env | {
        "TB_MCP_COMMAND": json.dumps(server_command("--transport", "stdio")),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        ["node", "client.mjs", scenario, json.dumps({"run": RUN_ID, **options})],
        cwd=ts_dir,
        env=env,
        capture_output=True,
        timeout=600,
        check=True,
    )
    seen: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return seen


def keepalive(ts_dir: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    seen = ts_run(
        ts_dir,
        env,
        "plain",
        tool=SLEEP,
        arguments={"seconds": args.long_seconds},
        callId="keepalive",
        timeoutMs=args.client_timeout_ms,
    )
    return {
        "tool_s": args.long_seconds,
        "client_timeout_ms": args.client_timeout_ms,
        "answered": "error" not in seen,
        "is_error": seen.get("isError"),
        "status": (seen.get("structured") or {}).get("status"),
        "error": seen.get("error"),
        "elapsed_s": seen["ms"] / 1000,
        "progress_notifications": seen["progress"],
    }


def task(ts_dir: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    created, result = [], []
    for n in range(args.repetitions):
        seen = ts_run(ts_dir, env, "task", tool=SLEEP, arguments={"seconds": 0}, callId=f"task-{n}")
        assert seen["messages"][-1] == "result", seen
        created.append(seen["createdMs"])
        result.append(seen["resultMs"])
    return {
        "create_ms": {"median": statistics.median(created), "max": max(created)},
        "create_to_result_ms": {"median": statistics.median(result), "max": max(result)},
        "raw": {"create_ms": created, "result_ms": result},
    }


def cancel(server: HttpServer, logs: Path, args: argparse.Namespace) -> dict[str, Any]:
    answered, stopped = [], []
    for n in range(args.repetitions):
        exit_file = logs / f"beat-{n}.exit"
        created = anyio.run(
            send,
            server.url,
            "tools/call",
            {
                "name": BEAT,
                "arguments": {"seconds": 30, "exit_file": str(exit_file)},
                "task": {},
                "_meta": meta(f"cancel-{n}"),
            },
        )
        time.sleep(2.0)
        sent = time.time()
        state = anyio.run(send, server.url, "tasks/cancel", {"taskId": created["task"]["taskId"]})
        answered.append(time.time() - sent)
        assert state["status"] == "cancelled", state
        deadline = time.monotonic() + 60
        while not exit_file.exists() or not exit_file.read_text():
            assert time.monotonic() < deadline, "the tool never stopped"
            time.sleep(0.01)
        stopped.append(float(exit_file.read_text()) - sent)
    return {
        "cancel_answered_s": {"median": statistics.median(answered), "max": max(answered)},
        "cancel_to_tool_stopped_s": {"median": statistics.median(stopped), "max": max(stopped)},
        "raw": {"answered_s": answered, "stopped_s": stopped},
    }


async def result_when_up(url: str, task_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await send(url, "tasks/result", {"taskId": task_id})
        except (OSError, httpx2.HTTPError, ExceptionGroup):
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.02)


def restart(server: HttpServer, store: RedisCanonicalStore, args: argparse.Namespace) -> Any:
    after_seal, restart_s = [], []
    for n in range(args.repetitions):
        call_id = f"restart-{n}"
        created = anyio.run(
            send,
            server.url,
            "tools/call",
            {"name": SLEEP, "arguments": {"seconds": 10}, "task": {}, "_meta": meta(call_id)},
        )
        time.sleep(2.0)
        killed = time.monotonic()
        server.kill()
        server.launch()
        answer = anyio.run(result_when_up, server.url, created["task"]["taskId"])
        received = time.time()
        restart_s.append(time.monotonic() - killed)
        assert answer["isError"] is False, answer
        record = store.get(CanonicalKey(run_id=RUN_ID, tool_call_id=call_id), with_raw=False)
        assert record is not None
        after_seal.append(received - record.updated_at.timestamp())
    return {
        "seal_to_tasks_result_s": {"median": statistics.median(after_seal), "max": max(after_seal)},
        "kill_to_result_s": {"median": statistics.median(restart_s), "max": max(restart_s)},
        "raw": {"seal_to_result_s": after_seal, "kill_to_result_s": restart_s},
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    parts = set(args.only.split(",")) if args.only else set(PARTS)
    settings = bench_settings(args.redis_url).model_copy(
        update={"tools": "bench.studies.mcp_tools:registry"}
    )
    for db in OWN_DBS:
        redis.Redis.from_url(db_url(args.redis_url, db)).flushdb()
    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=settings.ttl_s)
    store.open_run(RunContext(run_id=RUN_ID, authorized_tools=frozenset({SLEEP, BEAT})))
    env = settings_env(settings)
    logs = Path(tempfile.mkdtemp(prefix="bench-mcp-clients-"))
    server = HttpServer(port=free_port(), log=logs / "server.log", env=env)
    figures: dict[str, Any] = {}

    def worker() -> WorkerProcess:
        return WorkerProcess(
            module="tasks",
            name="mcp-clients",
            app=create_app(settings, name="bench_mcp_clients"),
            settings=settings,
            pool=Pool("threads", 4),
            queues=("tools", "projections"),
            log_dir=logs,
        )

    ts_dir = Path(args.ts_dir) if args.ts_dir else None
    if ts_dir is not None:
        shutil.copy(ROOT / "tests" / "mcp" / "ts" / "client.mjs", ts_dir / "client.mjs")
    try:
        with running(worker):
            server.start()
            if "keepalive" in parts and ts_dir is not None:
                figures["keepalive"] = keepalive(ts_dir, env, args)
                print(f"keepalive: {figures['keepalive']}", file=sys.stderr)
            if "task" in parts and ts_dir is not None:
                figures["task"] = task(ts_dir, env, args)
                print(f"task: {figures['task']}", file=sys.stderr)
            if "cancel" in parts:
                figures["cancel"] = cancel(server, logs, args)
                print(f"cancel: {figures['cancel']}", file=sys.stderr)
            if "restart" in parts:
                figures["restart"] = restart(server, store, args)
                print(f"restart: {figures['restart']}", file=sys.stderr)
    finally:
        server.stop(timeout_s=15)
        for db in OWN_DBS:
            redis.Redis.from_url(db_url(args.redis_url, db)).flushdb()
    figures["load_average"] = os.getloadavg()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.studies.mcp_clients", description=__doc__
    )
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="Redis server (no DB)")
    parser.add_argument("--long-seconds", type=float, default=75.0)
    parser.add_argument("--client-timeout-ms", type=int, default=5000)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--ts-dir", help="where @modelcontextprotocol/sdk is npm-installed")
    parser.add_argument("--only", help=f"comma-separated parts of {','.join(PARTS)}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args)
    print(json.dumps(figures, indent=None if not args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
