"""The issue's second recipe: one redis-server (``appendonly yes``) is the store, the broker and
the result backend; a threads worker (-c 8) runs a steady load of 100 ms calls when the server
is SIGKILLed, and started again 5 s later.

    python -m bench.studies.chaos.shared_kill [--ports 22100-22199] [--pool threads] [--dir DIR]

Beat runs the reaper (every second; ``MAX_PENDING_S`` 20 s), so a call whose message or
worker was lost is sent again or ended. Prints (JSON) whether the worker exited, how the
accepted calls ended, and the worker's telling log lines.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench.rig.servers import PortRange, named
from bench.rig.workers import settings_env, start_beat, start_process, stop_group
from bench.studies.chaos.broker_kill import TELLING, parse_ports, wait_for, worker_command
from bench.studies.chaos.tools import SLEEP, registry
from boundary import RedisCanonicalStore, RunContext, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.settings import Settings
from tasks.wiring.app import create_app

#: Seconds of load before the kill, of downtime, and of load after the restart.
BEFORE_S, DOWN_S, AFTER_S = 5.0, 5.0, 5.0
#: Pause between two submits, seconds (about 40 calls a second, half the worker's capacity).
SUBMIT_EVERY_S = 0.025
#: Bound of the wait for every accepted call to end, seconds.
SETTLE_S = 90.0


def reproduce_under_load(
    directory: Path, ports: PortRange, pool: str = "threads"
) -> dict[str, Any]:
    server = named(ports, "shared", directory / "redis", appendonly=True).start()
    settings = Settings(
        redis_url=server.db_url(0),
        tools="bench.studies.chaos.tools:registry",
        max_pending_s=20,
        reap_grace_s=1,
        reap_interval_s=1,
    )
    env = settings_env(settings)
    processes: list[subprocess.Popen[bytes]] = []
    log = directory / "worker.log"
    try:
        processes.append(start_process(worker_command(pool), env, log))
        processes.append(start_beat(env, directory / "beat-schedule", directory / "beat.log"))
        wait_for(lambda: " ready." in log.read_text(errors="replace"), 60, "worker start")
        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
        boundary = ToolBoundary(
            store=store,
            registry=registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="chaos-shared")),
            max_pending_s=settings.max_pending_s,
            reap_grace_s=settings.reap_grace_s,
        )
        run = RunContext(run_id=f"shared-{uuid.uuid4().hex[:8]}", authorized_tools={SLEEP})
        accepted: list[str] = []
        refused: Counter[str] = Counter()
        stop = threading.Event()

        def submit_steadily() -> None:
            n = 0
            while not stop.is_set():
                call = ToolCallEnvelope(
                    run_id=run.run_id,
                    tool_call_id=f"c{n}",
                    tool_name=SLEEP,
                    arguments={"seconds": 0.1},
                )
                n += 1
                submission = boundary.submit(call, run)
                if submission.accepted:
                    accepted.append(call.tool_call_id)
                elif submission.outcome is not None:
                    refused[str(submission.outcome.error_code)] += 1
                time.sleep(SUBMIT_EVERY_S)

        submitter = threading.Thread(target=submit_steadily, daemon=True)
        submitter.start()
        time.sleep(BEFORE_S)
        server.kill()
        time.sleep(DOWN_S)
        server.start()
        time.sleep(AFTER_S)
        stop.set()
        submitter.join()
        give_up = time.monotonic() + SETTLE_S
        while True:
            outcomes = [boundary.outcome(run.run_id, i, timeout=0.05) for i in accepted]
            if not any(o.pending for o in outcomes) or time.monotonic() > give_up:
                break
            time.sleep(1.0)
        ends = Counter(
            str(o.error_code.value if o.error_code else o.status.value) for o in outcomes
        )
        lines = log.read_text(errors="replace").splitlines()
        return {
            "pool": pool,
            "worker_exit_code": processes[0].poll(),
            "worker_alive": processes[0].poll() is None,
            "accepted": len(accepted),
            "ended": dict(ends),
            "refused_at_submit": dict(refused),
            "not_ready": [i for i, o in zip(accepted, outcomes, strict=True) if o.is_error][:20],
            "log": [line[:300] for line in lines if any(t in line for t in TELLING)][:40],
        }
    finally:
        for process in processes:
            stop_group(process, timeout_s=20)
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ports", default="22100-22199", help="FIRST-LAST for the redis-server")
    parser.add_argument("--pool", default="threads", choices=("threads", "prefork"))
    parser.add_argument("--dir", default=None, help="where the server's data and the logs go")
    args = parser.parse_args(argv)
    directory = Path(args.dir or tempfile.mkdtemp(prefix="chaos-shared-"))
    report = reproduce_under_load(directory, parse_ports(args.ports), args.pool)
    report["worker_log"] = str(directory / "worker.log")
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0 if report["worker_alive"] else 1


if __name__ == "__main__":
    sys.exit(main())
