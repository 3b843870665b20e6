"""``python -m bench.studies.ceiling``: how many calls a second one Redis server sustains.

Driver processes run the store's own steps for every call, the same Lua scripts with the same
keys and arguments the store sends, one round trip each as the store sends them (``create``,
``claim``, ``store_raw``, the project step's read, ``seal`` with its Pub/Sub notification,
which carries the outcome: the waiter reads nothing back). ``--batch B`` takes B calls
together, each of their round trips in one pipeline: 1 (the default) costs the server what
a fleet's clients cost it; more shows the server's work without the round trips' own cost.
Each driver also waits the way a caller does: one Pub/Sub connection, subscribed to the
channel of each run in flight (``SUBSCRIBE`` once a run, ``UNSUBSCRIBE`` when its calls are
sealed), so every seal's ``PUBLISH`` reaches a subscriber.

``--modes full`` adds, per call, the broker's and the events' round trips of our Celery chain
of two tasks on the same server (``Driver.task_steps``, with a real task message of ours as
the payload): per task the send, its task-sent event (the execute task's from the caller's
event thread, a round trip of its own; the project task's in the same pipeline as its send,
as a worker chains it), the worker's pop, kombu's unacked bookkeeping at delivery and at the
ack, and the worker's received, started and succeeded events, which a worker sends together
at most once per ``EVENTS_FLUSH_S`` (or at ``EVENTS_BUFFER_LIMIT`` events) as one
``PUBLISH`` (``tasks/worker/event_flush.py``; each driver is one such worker). ``--modes
inline`` is ``full`` with the opt-in ``TOOL_BOUNDARY_PROJECT_IN_LINE=true``: one task a call,
no read back of the record, and the seal keeps the raw response (no ``store_raw`` of its own).

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
import functools
import json
import multiprocessing
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

from bench.peers.tools import NOOP
from bench.suite.config import BROKER_DB, DEFAULT_REDIS_URL, STORE_DB, db_url
from bench.suite.cpu import server_cpu_s
from bench.suite.lock import exclusive
from bench.suite.meta import commit, load
from boundary import CanonicalKey, EvidenceStatus
from boundary.limits import canonical_json
from boundary.store import keys
from boundary.store.codec import create_args, seal_args
from boundary.store.scripts import record_script

#: Seconds each driver count runs, after a warm-up of ``WARMUP_S``.
SECONDS = 10.0
WARMUP_S = 1.0
#: Calls a driver takes together, each round trip of theirs in one pipeline: 1 is a fleet's
#: clients (every step its own round trip); more measures the server's work without the
#: round trips' cost (reads, writes, wake-ups), a floor no fleet reaches.
BATCH = 1
#: What a driver sends a call: the store's round trips alone, with our two-task chain's
#: broker traffic, or with one task's (the project step in line).
MODES = ("store", "full", "inline")
#: Seconds a round waits for its seal notifications before it fails.
NOTIFY_TIMEOUT_S = 10.0
#: Calls per run (as an agent makes them; one SUBSCRIBE per run).
CALLS_PER_RUN = 10
REQUEST = canonical_json({"query": "ping"})
RAW = canonical_json({"ok": True})
RESULT = canonical_json({"ok": True})
#: The size of a task event's JSON as Celery publishes it (bytes, measured on a B3 run).
EVENT_BYTES = 700
#: A worker's task events go out together at most this often (the default
#: ``TOOL_BOUNDARY_WORKER_EVENTS_FLUSH_MS``), or at once when this many are buffered
#: (Celery's ``EventDispatcher.buffer_limit``).
EVENTS_FLUSH_S = 0.005
EVENTS_BUFFER_LIMIT = 24


def _script(name: str) -> str:
    return record_script(name)


Step = Callable[[Any, CanonicalKey], None]


class Driver:
    """One process's calls: each call is the same round trips as a real one, in the same
    order (``steps``); ``batch`` calls take each round trip together, in one pipeline."""

    def __init__(self, server_url: str, batch: int, mode: str, message: bytes) -> None:
        self.store = redis.Redis.from_url(db_url(server_url, STORE_DB), decode_responses=True)
        self.broker = redis.Redis.from_url(db_url(server_url, BROKER_DB))
        self.scripts = {
            name: self.store.register_script(_script(name))
            for name in ("create", "claim", "store_raw", "seal")
        }
        self.waiter = self.store.pubsub()
        if mode not in MODES:
            raise ValueError(f"not a mode: {mode!r} (one of {', '.join(MODES)})")
        self.batch, self.mode, self.message = batch, mode, message
        self.token = secrets.token_hex(4)
        self.calls = 0
        self.event = b"x" * EVENT_BYTES
        #: The worker's task events not sent yet, and when it last sent them.
        self.events_held = 0
        self.events_sent_at = 0.0

    def keys_of(self, round_no: int) -> list[CanonicalKey]:
        return [
            CanonicalKey(
                run_id=f"ceil-{self.token}-{round_no}-{n // CALLS_PER_RUN}",
                tool_call_id=f"call_{n % CALLS_PER_RUN}",
            )
            for n in range(self.batch)
        ]

    def steps(self) -> list[tuple[Any, Step]]:
        """A call's round trips, in order, each with the client it goes to."""
        store: list[tuple[Any, Step]] = [
            (self.store, self.create),
            (self.store, self.claim),
            (self.store, self.store_raw),
            (self.store, self.project_read),
            (self.store, self.seal),
        ]
        if self.mode == "store":
            return store
        execute, executed = self.task_steps("execute")
        if self.mode == "inline":
            # TOOL_BOUNDARY_PROJECT_IN_LINE: one task; the project step runs on its thread
            # with the response held (no raw write, no read back): its seal keeps the raw
            # response, before the task's success and ack.
            return [*store[:2], *execute, (self.store, self.seal_with_raw), *executed]
        project, projected = self.task_steps("project")
        # The execute task is sent with the call and delivered before the claim; acked after
        # the raw write, when the project task is sent; the project task acked after the seal.
        return [*store[:1], *execute, *store[1:3], *executed, *project, *store[3:5], *projected]

    def round(self, round_no: int) -> None:
        calls = self.keys_of(round_no)
        channels = sorted({keys.sealed_channel(key.run_id) for key in calls})
        self.waiter.subscribe(*channels)
        for client, step in self.steps():
            pipe = client.pipeline(transaction=False)
            for key in calls:
                step(pipe, key)
            # (a step that only buffers events sends nothing: an empty pipeline is no round trip)
            pipe.execute(raise_on_error=False)
            if step in (self.seal, self.seal_with_raw):
                self.hear(len(calls))
            self.flush_events()
        self.waiter.unsubscribe(*channels)
        self.calls += len(calls)

    def create(self, pipe: Any, key: CanonicalKey) -> None:
        run_keys, argv = create_args(key, _CREATE_TERMS, ttl_ms=600_000, index=True)
        self.scripts["create"](keys=run_keys, args=argv, client=pipe)

    def claim(self, pipe: Any, key: CanonicalKey) -> None:
        run_keys = [keys.record_key(key), keys.pending_key(key.run_id)]
        self.scripts["claim"](keys=run_keys, args=[1, key.identity], client=pipe)

    def store_raw(self, pipe: Any, key: CanonicalKey) -> None:
        now_ms = int(time.time() * 1000)
        self.scripts["store_raw"](keys=[keys.record_key(key)], args=[RAW, now_ms], client=pipe)

    def project_read(self, pipe: Any, key: CanonicalKey) -> None:
        """The project step's read of the record (a prefork worker's, mostly: a threads
        worker often has it handed over from the execute step)."""
        pipe.hgetall(keys.record_key(key))

    def seal(self, pipe: Any, key: CanonicalKey, terms: Any = None) -> None:
        terms = _SEAL_TERMS if terms is None else terms
        run_keys, argv = seal_args(key, terms, now_ms=int(time.time() * 1000), index=True)
        self.scripts["seal"](keys=run_keys, args=argv, client=pipe)

    def seal_with_raw(self, pipe: Any, key: CanonicalKey) -> None:
        """The in-line seal, which keeps the held raw response (``project_held``)."""
        self.seal(pipe, key, _SEAL_WITH_RAW_TERMS)

    def flush_events(self) -> None:
        """Sends the worker's held task events as one message, if the last went out
        ``EVENTS_FLUSH_S`` ago or ``EVENTS_BUFFER_LIMIT`` are held."""
        if not self.events_held:
            return
        now = time.monotonic()
        due = now - self.events_sent_at >= EVENTS_FLUSH_S
        if due or self.events_held >= EVENTS_BUFFER_LIMIT:
            channel = f"/{BROKER_DB}.celeryev/task.multi"
            self.broker.publish(channel, self.event * self.events_held)
            self.events_held, self.events_sent_at = 0, now

    def hear(self, seals: int) -> None:
        """Reads ``seals`` seal notifications (the subscriptions' confirmations aside)."""
        heard, give_up = 0, time.monotonic() + NOTIFY_TIMEOUT_S
        while heard < seals:
            if time.monotonic() > give_up:
                raise RuntimeError(f"{seals - heard} seal notification(s) did not arrive")
            message = self.waiter.get_message(timeout=1.0)
            if message is not None and message["type"] == "message":
                heard += 1

    def task_steps(self, task: str) -> tuple[list[tuple[Any, Step]], list[tuple[Any, Step]]]:
        """One task's broker steps, until it runs and after: sent (LPUSH, and the task-sent
        event: for the execute task a round trip of its own, from the caller's event thread;
        for the project task, chained by a worker, in the same pipeline), delivered (BRPOP's
        pop, kombu's unacked bookkeeping in MULTI/EXEC), received and started events; then
        the succeeded event and the ack (MULTI/EXEC). The worker's events are held and sent
        together (``flush_events``)."""
        queue = f"ceiling_{task}"
        sent_channel = f"/{BROKER_DB}.celeryev/task.sent"

        def tag(key: CanonicalKey) -> str:
            return f"{key.identity}:{task}"

        def send(pipe: Any, key: CanonicalKey) -> None:
            pipe.lpush(queue, self.message)

        def sent(pipe: Any, key: CanonicalKey) -> None:
            pipe.publish(sent_channel, self.event)

        def send_with_event(pipe: Any, key: CanonicalKey) -> None:
            send(pipe, key)
            sent(pipe, key)

        def pop(pipe: Any, key: CanonicalKey) -> None:
            pipe.rpop(queue)

        def deliver(pipe: Any, key: CanonicalKey) -> None:
            pipe.execute_command("MULTI")
            pipe.zadd("unacked_index", {tag(key): time.time()})
            pipe.hset("unacked", tag(key), self.message)
            pipe.execute_command("EXEC")

        def ack(pipe: Any, key: CanonicalKey) -> None:
            pipe.execute_command("MULTI")
            pipe.zrem("unacked_index", tag(key))
            pipe.hdel("unacked", tag(key))
            pipe.execute_command("EXEC")

        def worker_event(pipe: Any, key: CanonicalKey) -> None:
            self.events_held += 1

        broker = self.broker
        sending = [send, sent] if task == "execute" else [send_with_event]
        runs = [*sending, pop, deliver, worker_event, worker_event]
        return [(broker, step) for step in runs], [(broker, worker_event), (broker, ack)]


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
_SEAL_WITH_RAW_TERMS: Any = _SEAL_TERMS | {"raw": RAW}


def _drive(make: Callable[[], Any], until: float, counts: Any, n: int) -> None:
    driver = make()
    round_no = 0
    while time.time() < until:
        driver.round(round_no)
        round_no += 1
        counts[n] = driver.calls


def run_drivers(
    server_url: str, processes: int, seconds: float, make: Callable[[], Any]
) -> dict[str, Any]:
    """``processes`` drivers (each ``make()``, in a forked process) for ``seconds`` (after
    ``WARMUP_S``): calls/s and Redis CPU. A driver has ``round(n)`` and counts its ``calls``."""
    server = redis.Redis.from_url(server_url)
    context = multiprocessing.get_context("fork")
    counts = context.Array("q", processes)
    began = time.time()
    until = began + WARMUP_S + seconds
    workers = [
        context.Process(target=_drive, args=(make, until, counts, n), daemon=True)
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


def measure(
    server_url: str, processes: int, seconds: float, batch: int, mode: str, message: bytes
) -> dict[str, Any]:
    """``processes`` drivers of ``batch`` calls a round for ``seconds``: calls/s, Redis CPU."""
    make = functools.partial(Driver, server_url, batch, mode, message)
    return run_drivers(server_url, processes, seconds, make)


def task_message(server_url: str) -> bytes:
    """A task message of ours as the broker holds it (the execute step's, from a real
    dispatch to a scratch queue), the payload ``--modes full`` pushes."""
    from bench.suite.config import bench_settings
    from tasks.wiring.app import create_app

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
    parser = argparse.ArgumentParser(prog="python -m bench.studies.ceiling", description=__doc__)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--processes", default="1,2,4,8", help="driver counts, in turn")
    parser.add_argument(
        "--modes", default="store,full", help="store, full, inline (comma-separated)"
    )
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--lock-wait", type=float, default=600.0)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    given = sys.argv[1:] if argv is None else argv
    out: dict[str, Any] = {"command": " ".join(["python -m bench.studies.ceiling", *given])}
    out |= {"commit": commit(), "batch": args.batch, "seconds": args.seconds}
    out["load_before"] = load()
    with exclusive(args.redis_url, args.lock_wait):
        flush = [redis.Redis.from_url(db_url(args.redis_url, db)) for db in (STORE_DB, BROKER_DB)]
        for client in flush:
            client.flushdb()
        try:
            message = task_message(args.redis_url)
            out["task_message_bytes"] = len(message)
            for mode in args.modes.split(","):
                out[mode] = [
                    measure(args.redis_url, n, args.seconds, args.batch, mode, message)
                    for n in counts
                ]
                for client in flush:
                    client.flushdb()
        finally:
            for client in flush:
                client.flushdb()
    out["load_after"] = load()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
