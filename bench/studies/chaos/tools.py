"""The chaos run's tools (``TOOL_BOUNDARY_TOOLS=bench.studies.chaos.tools:registry``).

Every execution is counted in the chaos run's ledger, a redis-server no fault touches
(``TB_CHAOS_LEDGER_URL``): ``HINCRBY`` of ``<run_id>:<tool_call_id>:<attempt>`` in the hash
``chaos:started`` when the executor starts, and in ``chaos:finished`` when it returns or
raises. A run whose process was killed never finishes, so the report can tell a lawful re-run
of a lost attempt from a duplicate (``bench.studies.chaos.report``).
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import redis

from boundary import (
    EvidenceStatus,
    Projection,
    RetryPolicy,
    ToolRegistry,
    ToolSpec,
    current_call,
    heartbeat,
)

#: Where executions are counted (unset: not counted, e.g. a worker started by hand).
LEDGER_ENV = "TB_CHAOS_LEDGER_URL"
STARTED = "chaos:started"
FINISHED = "chaos:finished"

SHORT, LONG, LIMITED, SLEEP = "chaos_short", "chaos_long", "chaos_limited", "chaos_sleep"
#: The long tool's retry policy: the report allows this many attempts of its calls.
LONG_RETRY = RetryPolicy(max_attempts=3, backoff_s=0.5)


@functools.cache
def _ledger_client() -> redis.Redis | None:
    """One client per process (redis-py's pool starts afresh in a forked child)."""
    url = os.environ.get(LEDGER_ENV)
    if not url:
        return None
    return redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)


def _count(hash_name: str) -> None:
    call = current_call()
    client = _ledger_client()
    if call is None or client is None:
        return
    field = f"{call.run_id}:{call.tool_call_id}:{call.attempt}"
    # The ledger never faults; a failure here is the chaos run's own bug, so it raises.
    client.hincrby(hash_name, field, 1)


def counted(body: Any) -> Any:
    """``body`` as an executor whose every run is counted in the ledger."""

    def executor(arguments: dict[str, Any]) -> Any:
        _count(STARTED)
        try:
            return body(arguments)
        finally:
            _count(FINISHED)

    executor.__name__ = getattr(body, "__name__", "executor")
    return executor


def sleep(arguments: dict[str, Any]) -> dict[str, Any]:
    """Sleeps ``seconds`` (a tool that does nothing but take time)."""
    time.sleep(float(arguments.get("seconds", 0.1)))
    return {"slept": arguments.get("seconds", 0.1), "pid": os.getpid()}


def beating(arguments: dict[str, Any]) -> dict[str, Any]:
    """Works ``seconds`` in steps of 0.2 s, heartbeating at each."""
    seconds = float(arguments.get("seconds", 3.0))
    steps = max(int(seconds / 0.2), 1)
    for step in range(steps):
        heartbeat(progress=step / steps, message=f"step {step} of {steps}")
        time.sleep(seconds / steps)
    return {"steps": steps}


class CountProjector:
    """EVIDENCE_FOUND with the raw response's size; a pure function of it."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"n": len(raw)})


def build_registry() -> ToolRegistry:
    projector = CountProjector()
    return ToolRegistry(
        [
            ToolSpec(
                name=SLEEP,
                executor=counted(sleep),
                projector=projector,
                read_only=True,
                timeout_s=30,
            ),
            ToolSpec(
                name=SHORT,
                executor=counted(sleep),
                projector=projector,
                read_only=True,
                timeout_s=10,
            ),
            ToolSpec(
                name=LONG,
                executor=counted(beating),
                projector=projector,
                read_only=True,
                timeout_s=30,
                heartbeat_timeout_s=5,
                retry=LONG_RETRY,
                queue="long",
            ),
            # Fleet-wide concurrency 2 (flow control): calls past it wait in Redis for a slot.
            ToolSpec(
                name=LIMITED,
                executor=counted(sleep),
                projector=projector,
                read_only=True,
                timeout_s=20,
                concurrency=2,
            ),
        ]
    )


registry = build_registry()
