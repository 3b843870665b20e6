"""The issue-32 recipe: a threads worker whose broker redis-server is SIGKILLed while it runs
calls, then started again on the same port.

    python -m bench.studies.chaos.broker_kill [--ports 22000-22099] [--pool threads] [--dir DIR]

The broker runs on a redis-server of its own without persistence, the store and the result
backend on another; ``celery -A tasks worker --pool=threads -c 8 -Q tools,projections``;
6 calls of a tool that sleeps 1.5 s; once all run, ``kill -9`` of the broker, a new one on
the same port 5 s later. Prints (JSON) whether the worker exited, the lines of its log that
tell what happened, how the 6 calls ended, and whether a call sent afterwards was run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.rig.servers import PortRange, named
from bench.rig.workers import (
    celery_command,
    settings_env,
    start_process,
    stop_group,
    worker_args,
)
from boundary import (
    CanonicalKey,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks import CeleryDispatcher
from tasks.settings import Settings
from tasks.wiring.app import create_app

CALLS = 6
TOOL_S = 1.5
DOWN_S = 5.0
#: Seconds the worker is watched after the broker is back.
WATCH_S = 20.0
#: Seconds left for the worker's last acks before the broker is read.
SETTLE_S = 2.0
#: Log lines worth reporting (the rest is the worker's usual chatter).
TELLING = ("Restoring", "unacknowledged", "Unrecoverable", "CRITICAL", "Traceback", "Connected to")


def worker_command(pool: str, concurrency: int = 8) -> list[str]:
    return celery_command("tasks", *worker_args(pool, concurrency, ("tools", "projections")))


def reproduce(
    directory: Path, ports: PortRange, pool: str = "threads", broker_aof: bool = False
) -> dict[str, Any]:
    broker = named(ports, "broker", directory / "broker", appendonly=broker_aof)
    broker.start()
    store_server = named(ports, "store", directory / "store", appendonly=False)
    store_server.start()
    worker: subprocess.Popen[bytes] | None = None
    log = directory / "worker.log"
    try:
        settings = Settings(
            redis_url=store_server.db_url(0),
            broker_url=broker.db_url(0),
            result_backend=store_server.db_url(1),
            tools="bench.studies.chaos.tools:registry",
        )
        from bench.studies.chaos.tools import SLEEP, registry

        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
        boundary = ToolBoundary(
            store=store,
            registry=registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="chaos-repro")),
        )
        worker = start_process(worker_command(pool), settings_env(settings), log)
        wait_for(lambda: " ready." in log.read_text(errors="replace"), 60, "worker start")
        run = RunContext(run_id=f"repro-{uuid.uuid4().hex[:8]}", authorized_tools={SLEEP})
        keys = [CanonicalKey(run_id=run.run_id, tool_call_id=f"c{n}") for n in range(CALLS)]
        for key in keys:
            call = ToolCallEnvelope(
                run_id=run.run_id,
                tool_call_id=key.tool_call_id,
                tool_name=SLEEP,
                arguments={"seconds": TOOL_S},
            )
            assert boundary.submit(call, run).accepted
        wait_for(
            lambda: all((r := store.get(k)) and r.started_at for k in keys), 30, "calls to run"
        )
        # When the broker dies under the running calls and comes back 5 s later
        broker.kill()
        time.sleep(DOWN_S)
        broker.start()
        watch_until = time.monotonic() + WATCH_S
        while time.monotonic() < watch_until and worker.poll() is None:
            time.sleep(0.2)
        exited = worker.poll()
        outcomes = [boundary.outcome(run.run_id, k.tool_call_id, timeout=30) for k in keys]
        after = None
        if exited is None:
            call = ToolCallEnvelope(
                run_id=run.run_id, tool_call_id="after", tool_name=SLEEP, arguments={"seconds": 0}
            )
            after = boundary.invoke(call, run, timeout=30).status.value
        lines = log.read_text(errors="replace").splitlines()
        time.sleep(SETTLE_S)  # the last call's ack is sent after its outcome is read
        return {
            "pool": pool,
            "broker_aof": broker_aof,
            # kombu's record of delivered, unacknowledged messages (a broker with AOF kept it)
            "broker_unacked_left": broker.client().hlen("unacked"),
            "worker_exit_code": exited,
            "worker_alive": exited is None,
            "calls": [o.error_code.value if o.error_code else o.status.value for o in outcomes],
            "call_after_restart": after,
            "log": [line[:300] for line in lines if any(t in line for t in TELLING)][:40],
        }
    finally:
        if worker is not None:
            stop_group(worker, timeout_s=20)
        broker.stop()
        store_server.stop()


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    give_up = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > give_up:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def parse_ports(text: str) -> PortRange:
    first, last = (int(part) for part in text.split("-"))
    return PortRange(first, last)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ports", default="22000-22099", help="FIRST-LAST for the redis-servers")
    parser.add_argument("--pool", default="threads", choices=("threads", "prefork", "solo"))
    parser.add_argument("--broker-aof", action="store_true", help="the broker keeps an AOF")
    parser.add_argument("--dir", default=None, help="where the servers' data and the log go")
    args = parser.parse_args(argv)
    directory = Path(args.dir or tempfile.mkdtemp(prefix="chaos-repro-"))
    report = reproduce(directory, parse_ports(args.ports), args.pool, args.broker_aof)
    report["worker_log"] = str(directory / "worker.log")
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0 if report["worker_alive"] else 1


if __name__ == "__main__":
    sys.exit(main())
