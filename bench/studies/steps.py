"""What a call's two worker steps cost in one process, without Celery: ``python -m
bench.studies.steps``.

``execute_step`` then ``project_step`` of the no-op tool (``bench.peers.tools``), one call after the
other on one thread against a real Redis (the benchmark's store DB by default, under its
lock; every key it writes is deleted afterwards, nothing is flushed), once with
the tool and projector handed to tool threads (the time limit as prefork and solo workers
keep it), once run on the calling thread under the watchdog (as the threads pool runs them,
``tasks.worker.pool``), and once on the calling thread with no limit at all (as the ablation worker,
``bench.peers.inline``, runs them), interleaved round by round. Per call: the process's CPU (all
threads) and wall time, medians over the rounds. The store's three round trips are included;
the Redis server's own time is not.

``--packing``: the calling-thread side only, with the store's command packer
(``boundary.store.packing``) and with redis-py's own, interleaved round by round.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any
from unittest import mock

import redis

import boundary.steps.execute
import boundary.steps.project
from bench.peers.tools import NOOP, registry
from bench.peers.unbounded import run_on_this_thread
from bench.suite.config import DEFAULT_REDIS_URL, STORE_DB, db_url
from bench.suite.lock import exclusive
from boundary import CanonicalKey, RedisCanonicalStore
from boundary.steps import execute_step, project_step
from boundary.store import keys
from boundary.tool_threads import run_inline_here

#: Calls per timed round, and rounds per side.
CALLS = 1_000
ROUNDS = 5


@contextmanager
def _on_this_thread() -> Iterator[None]:
    with (
        mock.patch.object(boundary.steps.execute, "run_bounded", run_on_this_thread),
        mock.patch.object(boundary.steps.project, "run_bounded", run_on_this_thread),
    ):
        yield


class _NoPool:
    """A pool that never needs to replace this thread (no run here overruns)."""

    def replace(self) -> None:
        raise RuntimeError("a benchmark run overran its time limit")

    def retire(self) -> None:
        pass


@contextmanager
def _watched() -> Iterator[None]:
    run_inline_here(_NoPool())
    try:
        yield
    finally:
        run_inline_here(None)


#: Each side and how it runs the tool and the projector.
SIDES = {"threads": nullcontext, "watchdog": _watched, "inline": _on_this_thread}


def _forget(store: RedisCanonicalStore, calls: list[CanonicalKey]) -> None:
    """Deletes the records and run keys of ``calls`` and drops their runs from the indexes."""
    run_ids = sorted({key.run_id for key in calls})
    pipe = store.client.pipeline(transaction=False)
    for key in calls:
        pipe.delete(keys.record_key(key))
    for run_id in run_ids:
        for name in (keys.budget_key, keys.progress_key, keys.pending_key, keys.run_key):
            pipe.delete(name(run_id))
    pipe.zrem(keys.RUNS, *run_ids)
    pipe.zrem(keys.PENDING_RUNS, *run_ids)
    pipe.execute()


def _round(store: RedisCanonicalStore, calls: int, side: str) -> tuple[float, float]:
    """CPU and wall milliseconds per call of one round of ``calls`` calls."""
    run = f"steps-{secrets.token_hex(4)}"
    call_keys = [
        CanonicalKey(run_id=f"{run}-{n // 10}", tool_call_id=f"call_{n % 10}") for n in range(calls)
    ]
    for key in call_keys:
        store.create(
            key,
            tool_name=NOOP,
            request='{"query":"ping"}',
            deadline=None,
            max_pending_s=600,
            reap_grace_s=60,
            max_run_calls=None,
            max_tool_calls=None,
        )
    try:
        with SIDES[side]():
            cpu, wall = time.process_time(), time.perf_counter()
            for key in call_keys:
                execute_step(store, registry, key)
                outcome = project_step(store, registry, key)
                if outcome.status != "READY":
                    raise RuntimeError(f"call ended {outcome.error_code}")
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        _forget(store, call_keys)
    return cpu * 1000 / calls, wall * 1000 / calls


def measure(store_url: str, calls: int = CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    """Both sides, ``rounds`` rounds each, alternating which goes first, on the store at
    ``store_url`` (a Redis URL with its DB)."""
    store = RedisCanonicalStore.from_url(store_url, ttl_s=600)
    samples: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
    try:
        _round(store, min(calls, 100), "threads")  # warm-up: connections, tool threads
        _round(store, min(calls, 100), "watchdog")  # and the watchdog's thread
        for n in range(rounds):
            order = list(SIDES)[n % len(SIDES) :] + list(SIDES)[: n % len(SIDES)]
            for side in order:
                samples[side].append(_round(store, calls, side))
    finally:
        store.client.close()
    out: dict[str, Any] = {"calls": calls, "rounds": rounds}
    for side, values in samples.items():
        out[f"{side}_cpu_ms"] = statistics.median(cpu for cpu, _ in values)
        out[f"{side}_wall_ms"] = statistics.median(wall for _, wall in values)
    out["handoffs_cpu_ms"] = out["threads_cpu_ms"] - out["inline_cpu_ms"]
    out["watchdog_over_inline_cpu_ms"] = out["watchdog_cpu_ms"] - out["inline_cpu_ms"]
    return out


def compare_packing(store_url: str, calls: int = CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    """The inline side's CPU a call with the store's packer (``boundary.store.packing``) and
    with redis-py's own, ``rounds`` rounds each, alternating which goes first."""
    stores = {
        "hiredis": RedisCanonicalStore.from_url(store_url, ttl_s=600),
        # A client redis-py made on its own: its connections pack as redis-py does.
        "redis_py": RedisCanonicalStore(
            client=redis.Redis.from_url(store_url, decode_responses=True), ttl_s=600
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in stores}
    try:
        for store in stores.values():
            _round(store, min(calls, 100), "inline")  # warm-up: connections
        for n in range(rounds):
            order = list(stores) if n % 2 == 0 else list(reversed(stores))
            for name in order:
                samples[name].append(_round(stores[name], calls, "inline")[0])
    finally:
        for store in stores.values():
            store.client.close()
    out: dict[str, Any] = {"calls": calls, "rounds": rounds}
    for name, values in samples.items():
        out[f"{name}_cpu_ms"] = statistics.median(values)
        out[f"{name}_rounds_cpu_ms"] = values
    out["saved_cpu_ms"] = out["redis_py_cpu_ms"] - out["hiredis_cpu_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.steps", description=__doc__)
    parser.add_argument(
        "--redis-url",
        default=DEFAULT_REDIS_URL,
        help="Redis server; uses DB 3 and deletes what it wrote there",
    )
    parser.add_argument("--calls", type=int, default=CALLS, help="calls per round")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per side")
    parser.add_argument(
        "--lock-wait", type=float, default=600.0, help="seconds to wait for another benchmark"
    )
    parser.add_argument(
        "--packing",
        action="store_true",
        help="instead: the steps run on this thread with the store's command packer and with "
        "redis-py's own, interleaved (boundary.store.packing)",
    )
    args = parser.parse_args(argv)
    with exclusive(args.redis_url, args.lock_wait):
        store_url = db_url(args.redis_url, STORE_DB)
        run = compare_packing if args.packing else measure
        print(json.dumps(run(store_url, args.calls, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
