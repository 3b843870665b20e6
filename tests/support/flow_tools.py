"""Limited tools for the flow-control tests (``ToolSpec.concurrency``, ``tenant_concurrency``,
``rate_limit``, ``max_waiting``): they count their own executions in the store's Redis (keys
``tb:test-flow:<tag>:...`` of the store DB, flushed with it), so a test reads how many ran at
once across every worker process, and in which order they started.

Part of ``tests.support.celery_tools.registry`` (the in-process worker's); ``registry`` here is the
same tools alone, and ``paced`` (the paused-holder test's), for worker subprocesses
(``TOOL_BOUNDARY_TOOLS=tests.support.flow_tools:registry``).
"""

from __future__ import annotations

import os
import threading
import time
from functools import cache
from typing import Any

import redis

from boundary import (
    CallCancelled,
    RateLimit,
    RetryPolicy,
    ToolRegistry,
    ToolSpec,
    current_call,
    heartbeat,
)

#: Executions of a tool running now (hash: "<pid>:<identity>:<attempt>" -> tenant) and the
#: most that ever ran at once (the high-water mark, overall and per tenant).
_ENTER = """
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
local now = redis.call("HLEN", KEYS[1])
if now > tonumber(redis.call("GET", KEYS[2]) or "0") then
  redis.call("SET", KEYS[2], now)
end
local mine = redis.call("HINCRBY", KEYS[3], ARGV[2], 1)
if mine > tonumber(redis.call("HGET", KEYS[4], ARGV[2]) or "0") then
  redis.call("HSET", KEYS[4], ARGV[2], mine)
end
redis.call("RPUSH", KEYS[5], ARGV[3])
return now
"""
_LEAVE = """
if redis.call("HDEL", KEYS[1], ARGV[1]) == 1 then
  redis.call("HINCRBY", KEYS[3], ARGV[2], -1)
end
return 1
"""


def keys_of(tag: str) -> list[str]:
    """running, high-water, running per tenant, high-water per tenant, start order, starts
    (the store-clock start time of each call, ms)."""
    base = f"tb:test-flow:{tag}"
    return [f"{base}:{part}" for part in ("running", "hw", "tenants", "tenant-hw", "order", "at")]


#: ``hold`` calls (in the tests' own process: the in-process worker) run until a test sets
#: this, so "still holding its slot" does not depend on the machine's speed.
HOLD = threading.Event()


#: Where the tools count, when not the store's Redis (a store behind Sentinel: a plain URL).
COUNT_URL_ENV = "TB_TEST_FLOW_COUNT_URL"


@cache
def _client() -> redis.Redis:
    from tasks.runtime import get_settings

    url = os.environ.get(COUNT_URL_ENV) or get_settings().store_url
    return redis.Redis.from_url(url, decode_responses=True)


def metered(arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs ``ms`` milliseconds, heartbeating every 50 ms, counted in the tag's keys while it
    runs. With ``until``: first waits (heartbeating, at most 3 s) until that many ran at once,
    so a high-water mark of that many does not depend on the machine's speed. With ``hold``:
    first waits (heartbeating) until a test sets ``HOLD``."""
    call = current_call()
    assert call is not None
    tag = str(arguments.get("tag", "t"))
    tenant = str(arguments.get("tenant", "_"))
    keys = keys_of(tag)
    client = _client()
    member = f"{os.getpid()}:{call.run_id}:{call.tool_call_id}:{call.attempt}"
    identity = f"{call.run_id}:{call.tool_call_id}"
    started = call.started_at.timestamp() if call.started_at else time.time()
    client.eval(_ENTER, 5, *keys[:5], member, tenant, identity)
    client.rpush(keys[5], f"{identity}|{round(started * 1000)}")
    try:
        until = int(arguments.get("until", 0))
        waited = time.monotonic() + 3.0
        # Not wait_until: a tool's body, which heartbeats meanwhile and goes on after 3 s
        while until and int(client.get(keys[1]) or 0) < until and time.monotonic() < waited:
            heartbeat(message="waiting for the others")
            time.sleep(0.02)
        while arguments.get("hold") and not HOLD.wait(0.05):
            heartbeat(message="held")
        ends = time.monotonic() + float(arguments.get("ms", 50)) / 1000
        # Not a wait: the tool runs for its ``ms``, heartbeating
        while (left := ends - time.monotonic()) > 0:
            heartbeat(progress=1 - left, message="metered")
            time.sleep(min(left, 0.05))
    finally:
        client.eval(_LEAVE, 3, *keys[:3], member, tenant)
    return {"hits": [{"id": identity, "pid": os.getpid()}]}


def events_key(tag: str) -> str:
    """The tag's event list: what each execution did, in the order Redis saw it."""
    return f"tb:test-flow:{tag}:events"


def go_key(tag: str, call_id: str | None = None) -> str:
    """Set by a test: ``paced`` calls of the tag (or only the call ``call_id``'s executions)
    stop holding and return."""
    base = f"tb:test-flow:{tag}:go"
    return base if call_id is None else f"{base}:{call_id}"


def paced(arguments: dict[str, Any]) -> dict[str, Any]:
    """Holds its slot, heartbeating every 20 ms, until the test sets the tag's ``go_key`` (or
    its call's), then returns which attempt ran it. Each execution logs, in the tag's
    ``events_key`` list, ``enter``, every heartbeat that let it go on (``beat``), ``stopped``
    when a heartbeat told it to stop, and ``leave``, each as ``what|identity|attempt|pid``, and
    is counted in the tag's keys while it runs (as ``metered``)."""
    call = current_call()
    assert call is not None
    tag = str(arguments.get("tag", "p"))
    keys, events = keys_of(tag), events_key(tag)
    client = _client()
    identity = f"{call.run_id}:{call.tool_call_id}"
    member = f"{os.getpid()}:{identity}:{call.attempt}"
    label = f"{identity}|{call.attempt}|{os.getpid()}"
    client.eval(_ENTER, 5, *keys[:5], member, "_", identity)
    client.rpush(events, f"enter|{label}")
    try:
        while not client.exists(go_key(tag), go_key(tag, call.tool_call_id)):
            try:
                heartbeat(message="paced")
            except CallCancelled:
                client.rpush(events, f"stopped|{label}")
                raise
            client.rpush(events, f"beat|{label}")
            time.sleep(0.02)
    finally:
        client.eval(_LEAVE, 3, *keys[:3], member, "_")
        client.rpush(events, f"leave|{label}")
    return {"identity": identity, "attempt": call.attempt, "pid": os.getpid()}


class EchoProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Any:
        from boundary import EvidenceStatus, Projection

        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result=raw)


class CountProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Any:
        from boundary import EvidenceStatus, Projection

        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"n": len(raw)})


def build_specs() -> list[ToolSpec]:
    projector = CountProjector()
    common: dict[str, Any] = {
        "executor": metered,
        "projector": projector,
        "read_only": True,
        "timeout_s": 9.0,
        "heartbeat_timeout_s": 2.0,
    }
    return [
        # Three at once across the fleet; a lost attempt is retried (kill -9 test).
        ToolSpec(
            name="slot3",
            concurrency=3,
            retry=RetryPolicy(max_attempts=3, backoff_s=0),
            **common,
        ),
        # Two at once: tenants take turns (the fairness test).
        ToolSpec(name="turns", concurrency=2, **common),
        # Three at once, one per tenant.
        ToolSpec(name="per_tenant", concurrency=3, tenant_concurrency=1, **common),
        # Twenty starts a second, fleet-wide.
        ToolSpec(name="rated", rate_limit=RateLimit(limit=20, period_s=1.0), **common),
        # One at once, two may wait: the third is TOOL_BUSY.
        ToolSpec(name="narrow", concurrency=1, max_waiting=2, **common),
    ]


def paced_spec() -> ToolSpec:
    """Two at once, holding until told (the paused-holder test); a lost attempt is retried.
    Only in ``registry`` (worker subprocesses): its time limit is longer than the in-process
    worker's tests allow."""
    return ToolSpec(
        name="paced",
        executor=paced,
        projector=EchoProjector(),
        read_only=True,
        timeout_s=120.0,
        heartbeat_timeout_s=2.0,
        concurrency=2,
        retry=RetryPolicy(max_attempts=4, backoff_s=0),
    )


registry = ToolRegistry([*build_specs(), paced_spec()])
