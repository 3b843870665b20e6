"""``python -m bench.ceiling``: how many calls a second one Redis server sustains.

Driver processes run the store's own steps for every call, the same Lua scripts with the same
keys and arguments the store sends (``create``, ``claim``, ``store_raw``, the project step's
read, ``seal`` with its Pub/Sub notification, the waiter's read), pipelined ``--batch`` calls
at a time so the drivers' Python is not what runs out first. Each driver also waits the way
a caller does: one Pub/Sub connection, subscribed to the channel of each run in flight
(``SUBSCRIBE`` once a run, ``UNSUBSCRIBE`` when its calls are sealed), so every seal's
``PUBLISH`` reaches a subscriber.

``--modes full`` adds, per call, the broker's and the events' traffic of a Celery chain of
two tasks on the same server (``BROKER_COMMANDS``: the commands B3 counts for one of our
calls, with a real task message of ours as the payload).

Per driver count (``--processes 1,2,4,8``): calls/s, the Redis server's CPU per call and its
busy share (``INFO cpu`` over wall time), and the ceiling that CPU gives (a core's worth of
calls: ``1000 / redis_cpu_ms_per_call``). On a 2-core machine the drivers and the server
share the cores: calls/s stops growing when the drivers take the core Redis needs, so the
ceiling is the figure to carry to a bigger machine, the calls/s only where ``busy`` is near 1.
The bench's store DB (3) and broker DB (4) are flushed before and after, under the bench's
lock.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import secrets
import time
from importlib import resources
from typing import Any

import redis

from bench.config import BROKER_DB, DEFAULT_REDIS_URL, STORE_DB, db_url
from bench.cpu import server_cpu_s
from bench.lock import exclusive
from bench.tools import NOOP
from boundary import CanonicalKey, EvidenceStatus
from boundary.limits import canonical_json
from boundary.store import keys
from boundary.store.codec import create_args, seal_args

#: Seconds each driver count runs, after a warm-up of ``WARMUP_S``.
SECONDS = 10.0
WARMUP_S = 1.0
#: Calls a driver pipelines per round trip of each step.
BATCH = 50
#: Seconds a round waits for its seal notifications before it fails.
NOTIFY_TIMEOUT_S = 10.0
#: Calls per run (as an agent makes them; one SUBSCRIBE per run).
CALLS_PER_RUN = 10
REQUEST = canonical_json({"query": "ping"})
RAW = canonical_json({"ok": True})
RESULT = canonical_json({"ok": True})
#: Celery's commands per call on the broker's DB for a chain of two tasks with our settings
#: (late acks, task events): per task one LPUSH by the sender, one BRPOP by the worker, the
#: unacked bookkeeping at delivery (ZADD + HSET in MULTI/EXEC) and at the ack (ZREM + HDEL
#: in MULTI/EXEC), and four events (sent, received, started, succeeded), each a PUBLISH.
#: (B3 counts these on a real worker; see bench/README.md, "The ceiling of one Redis".)
TASKS_PER_CALL = 2
EVENTS_PER_TASK = 4
#: The size of a task event's JSON as Celery publishes it (bytes, measured on a B3 run).
EVENT_BYTES = 700


def _script(name: str) -> str:
    return resources.files("boundary.store").joinpath("lua", f"{name}.lua").read_text("utf-8")


class Driver:
    """One process's steps: each call's store steps, pipelined ``batch`` calls at a time."""

    def __init__(self, server_url: str, batch: int, full: bool, message: bytes) -> None:
        self.store = redis.Redis.from_url(db_url(server_url, STORE_DB), decode_responses=True)
        self.broker = redis.Redis.from_url(db_url(server_url, BROKER_DB))
        self.scripts = {
            name: self.store.register_script(_script(name))
            for name in ("create", "claim", "store_raw", "seal")
        }
        self.waiter = self.store.pubsub()
        self.batch, self.full, self.message = batch, full, message
        self.token = secrets.token_hex(4)
        self.calls = 0
        self.event = b"x" * EVENT_BYTES

    def keys_of(self, round_no: int) -> list[CanonicalKey]:
        return [
            CanonicalKey(
                run_id=f"ceil-{self.token}-{round_no}-{n // CALLS_PER_RUN}",
                tool_call_id=f"call_{n % CALLS_PER_RUN}",
            )
            for n in range(self.batch)
        ]

    def round(self, round_no: int) -> None:
        calls = self.keys_of(round_no)
        channels = sorted({keys.sealed_channel(key.run_id) for key in calls})
        self.waiter.subscribe(*channels)
        pipe = self.store.pipeline(transaction=False)
        for key in calls:
            run_keys, argv = create_args(key, _CREATE_TERMS, ttl_ms=600_000, index=True)
            self.scripts["create"](keys=run_keys, args=argv, client=pipe)
        pipe.execute()
        if self.full:
            self.broker_traffic(calls, "execute")
        for key in calls:
            claim_keys = [keys.record_key(key), keys.pending_key(key.run_id)]
            self.scripts["claim"](keys=claim_keys, args=[1, key.identity], client=pipe)
        pipe.execute()
        now_ms = int(time.time() * 1000)
        for key in calls:
            self.scripts["store_raw"](keys=[keys.record_key(key)], args=[RAW, now_ms], client=pipe)
            pipe.hgetall(keys.record_key(key))  # the project step's read
        pipe.execute()
        if self.full:
            self.broker_traffic(calls, "project")
        for key in calls:
            run_keys, argv = seal_args(key, _SEAL_TERMS, now_ms=now_ms, index=True)
            self.scripts["seal"](keys=run_keys, args=argv, client=pipe)
        pipe.execute()
        self.hear(len(calls))
        for key in calls:
            pipe.hgetall(keys.record_key(key))  # the waiter's read of the sealed record
        pipe.execute()
        self.waiter.unsubscribe(*channels)
        self.calls += len(calls)

    def hear(self, seals: int) -> None:
        """Reads ``seals`` seal notifications (the subscriptions' confirmations aside)."""
        heard, give_up = 0, time.monotonic() + NOTIFY_TIMEOUT_S
        while heard < seals:
            if time.monotonic() > give_up:
                raise RuntimeError(f"{seals - heard} seal notification(s) did not arrive")
            message = self.waiter.get_message(timeout=1.0)
            if message is not None and message["type"] == "message":
                heard += 1

    def broker_traffic(self, calls: list[CanonicalKey], task: str) -> None:
        """One task's broker commands per call: sent, delivered, acked, and its events."""
        queue = f"ceiling_{task}"
        pipe = self.broker.pipeline(transaction=False)
        for _ in calls:
            pipe.lpush(queue, self.message)
            pipe.publish(f"/{BROKER_DB}.celeryev/task.sent", self.event)
        pipe.execute()
        for key in calls:
            pipe.rpop(queue)  # BRPOP's work on a non-empty list
            tag = f"{key.identity}:{task}"
            # kombu's QoS.append and ack: each a MULTI/EXEC pipeline of two commands.
            pipe.execute_command("MULTI")
            pipe.zadd("unacked_index", {tag: time.time()})
            pipe.hset("unacked", tag, self.message)
            pipe.execute_command("EXEC")
            for event in ("received", "started", "succeeded"):
                pipe.publish(f"/{BROKER_DB}.celeryev/task.{event}", self.event)
            pipe.execute_command("MULTI")
            pipe.zrem("unacked_index", tag)
            pipe.hdel("unacked", tag)
            pipe.execute_command("EXEC")
        pipe.execute(raise_on_error=False)


_CREATE_TERMS: Any = {
    "tool_name": NOOP,
    "request": REQUEST,
    "deadline": None,
    "max_pending_s": 600,
    "reap_grace_s": 60,
    "max_run_calls": None,
    "max_tool_calls": None,
}
_SEAL_TERMS: Any = {
    "evidence_status": EvidenceStatus.EVIDENCE_FOUND,
    "agent_result": RESULT,
    "scope": None,
}


def _drive(
    server_url: str, batch: int, full: bool, message: bytes, until: float, counts: Any, n: int
) -> None:
    driver = Driver(server_url, batch, full, message)
    round_no = 0
    while time.time() < until:
        driver.round(round_no)
        round_no += 1
        counts[n] = driver.calls


def measure(
    server_url: str, processes: int, seconds: float, batch: int, full: bool, message: bytes
) -> dict[str, Any]:
    """``processes`` drivers for ``seconds`` (after ``WARMUP_S``): calls/s and Redis CPU."""
    server = redis.Redis.from_url(server_url)
    context = multiprocessing.get_context("fork")
    counts = context.Array("q", processes)
    began = time.time()
    until = began + WARMUP_S + seconds
    workers = [
        context.Process(
            target=_drive, args=(server_url, batch, full, message, until, counts, n), daemon=True
        )
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(max(0.0, began + WARMUP_S - time.time()))
    calls_before, cpu_before, wall_before = sum(counts), server_cpu_s(server), time.time()
    time.sleep(max(0.0, until - time.time()))
    calls_after, cpu_after, wall_after = sum(counts), server_cpu_s(server), time.time()
    for worker in workers:
        worker.join(timeout=60)
    if any(worker.exitcode != 0 for worker in workers):
        raise RuntimeError("a driver failed")
    calls, wall = calls_after - calls_before, wall_after - wall_before
    redis_cpu = (cpu_after or 0.0) - (cpu_before or 0.0)
    per_call_ms = redis_cpu * 1000 / calls if calls else float("nan")
    return {
        "processes": processes,
        "calls": calls,
        "calls_per_s": calls / wall,
        "redis_cpu_ms_per_call": per_call_ms,
        "redis_busy": redis_cpu / wall,
        "ceiling_calls_per_s": 1000 / per_call_ms if calls else float("nan"),
    }


def task_message(server_url: str) -> bytes:
    """A task message of ours as the broker holds it (the execute step's, from a real
    dispatch to a scratch queue), the payload ``--modes full`` pushes."""
    from bench.config import bench_settings
    from tasks.app import create_app

    app = create_app(bench_settings(server_url), name="bench_ceiling")
    queue = f"ceiling_probe_{secrets.token_hex(4)}"
    app.send_task("tool_boundary.execute", args=("r", "c"), queue=queue)
    broker = redis.Redis.from_url(db_url(server_url, BROKER_DB))
    message = broker.rpop(queue)
    broker.delete(queue)
    if not isinstance(message, bytes):
        raise RuntimeError("the probe's task message did not reach the broker")
    return message


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--processes", default="1,2,4,8", help="driver counts, in turn")
    parser.add_argument("--modes", default="store,full", help="store, full, or both")
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--lock-wait", type=float, default=600.0)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    out: dict[str, Any] = {"batch": args.batch, "seconds": args.seconds, "load_before": _load()}
    with exclusive(args.redis_url, args.lock_wait):
        flush = [redis.Redis.from_url(db_url(args.redis_url, db)) for db in (STORE_DB, BROKER_DB)]
        for client in flush:
            client.flushdb()
        try:
            message = task_message(args.redis_url)
            out["task_message_bytes"] = len(message)
            for mode in args.modes.split(","):
                out[mode] = [
                    measure(args.redis_url, n, args.seconds, args.batch, mode == "full", message)
                    for n in counts
                ]
                for client in flush:
                    client.flushdb()
        finally:
            for client in flush:
                client.flushdb()
    out["load_after"] = _load()
    print(json.dumps(out, indent=2))
    return 0


def _load() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()]


if __name__ == "__main__":
    raise SystemExit(main())
