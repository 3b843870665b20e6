"""The DBOS peer's worker: the same tool call as ours, as a DBOS user writes it.

One workflow of two steps (``execute``: the no-op tool's raw response; ``project``: an
outcome of the same shape as ours), started from a DBOS queue whose ``worker_concurrency``
equals our worker's concurrency. Each step's output is checkpointed in PostgreSQL, as DBOS
does for every step. The caller (``bench.peers.dbos_side``) enqueues from another process through
``DBOSClient`` with the workflow id ``run:call``, as ours keys a call.

``python -m bench.peers.dbos_worker --db URL --queue NAME --concurrency N --polling S`` runs one
DBOS process that listens to that queue only, fully local: no Conductor, no cloud, no OTLP.
It writes ``READY_LINE`` to stdout once launched and runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from dbos import DBOS

from bench.peers.bare import outcome_shape
from bench.peers.tools import RAW

#: The application name: the client enqueues on its behalf (queues belong to it).
APP_NAME = "tb_bench"
#: The workflow's registered name, which the client enqueues by.
WORKFLOW = "tb_bench_tool_call"
#: What the worker prints once it dequeues.
READY_LINE = "tb-bench dbos worker ready"


@DBOS.step(name="tb_bench_execute")
def execute(run_id: str, tool_call_id: str) -> dict[str, Any]:
    """The no-op tool: its raw response, checkpointed as the step's output."""
    return RAW


@DBOS.step(name="tb_bench_project")
def project(tool_call_id: str, raw: dict[str, Any]) -> dict[str, Any]:
    """An outcome of the same shape and size as ours."""
    return outcome_shape(tool_call_id)


@DBOS.workflow(name=WORKFLOW)
def tool_call(run_id: str, tool_call_id: str) -> dict[str, Any]:
    raw = execute(run_id, tool_call_id)
    return project(tool_call_id, raw)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.dbos_worker")
    parser.add_argument("--db", required=True, help="the system database's URL")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--polling", type=float, required=True, help="queue polling, seconds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    DBOS(
        config={
            "name": APP_NAME,
            "system_database_url": args.db,
            # One executor per queue: each worker counts its own concurrency.
            "executor_id": f"tb-bench-{args.queue}",
            "log_level": "WARNING",
        }
    )
    DBOS.listen_queues([args.queue])
    DBOS.launch()
    DBOS.register_queue(
        args.queue,
        worker_concurrency=args.concurrency,
        polling_interval_sec=args.polling,
        on_conflict="always_update",
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(READY_LINE, flush=True)
    stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
