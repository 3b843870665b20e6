"""``python -m bench.studies.turn_parts``: where a turn's submit time goes, part by part,
against one call's (no worker runs: the calls stay queued; the bench's DBs are flushed after).

Alternating, ``--samples`` of each, p50 in ms, and the client's CPU per call:

- ``submit``: ``ToolBoundary.submit_many`` of a turn of ``--turn`` calls / ``submit`` of one;
- ``create``: ``store.create_many`` of the turn / ``store.create`` of one;
- ``publish``: ``CeleryDispatcher.dispatch_many`` of the turn / ``send_attempt`` of one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from bench.suite.config import BROKER_DB, DEFAULT_REDIS_URL, STORE_DB, bench_settings, db_url
from bench.suite.cpu import own_cpu_s
from bench.suite.sides import NOOP, Ours
from boundary import CanonicalKey, RunContext, ToolCallEnvelope
from boundary.call_steps import Prepared, prepare
from tasks.wiring.app import TOOLS_QUEUE
from tasks.wiring.dispatcher import CeleryDispatcher

#: Calls of a turn.
TURN = 8
#: Samples of each part and side.
SAMPLES = 300


def _turn(ours: Ours, size: int) -> tuple[list[ToolCallEnvelope], RunContext]:
    run = RunContext(run_id=f"tp-{uuid.uuid4().hex[:12]}", authorized_tools=frozenset({NOOP}))
    return [ours.envelope(run.run_id, f"c{i}") for i in range(size)], run


def _prepared(ours: Ours, size: int) -> list[Prepared]:
    envelopes, run = _turn(ours, size)
    made = [prepare(ours.boundary, e, run) for e in envelopes]
    return [p for p in made if isinstance(p, Prepared)]


def _keys(size: int) -> list[CanonicalKey]:
    run_id = f"tp-{uuid.uuid4().hex[:12]}"
    return [CanonicalKey(run_id=run_id, tool_call_id=f"c{i}") for i in range(size)]


@dataclass(frozen=True)
class Part:
    """One part of a submit: ``make(size)`` gives a fresh input of ``size`` calls (not
    timed), ``turn`` / ``one`` do it for the turn and for one call."""

    make: Callable[[int], Any]
    turn: Callable[[Any], Any]
    one: Callable[[Any], Any]


def parts(ours: Ours) -> dict[str, Part]:
    store, dispatcher = ours.store, ours.boundary.dispatcher
    assert isinstance(dispatcher, CeleryDispatcher)
    return {
        "submit": Part(
            lambda size: _turn(ours, size),
            lambda turn: ours.boundary.submit_many(*turn),
            lambda turn: ours.boundary.submit(turn[0][0], turn[1]),
        ),
        "create": Part(
            lambda size: _prepared(ours, size),
            lambda calls: store.create_many([(p.key, p.create) for p in calls]),
            lambda calls: store.create(calls[0].key, **calls[0].create),
        ),
        "publish": Part(
            _keys,
            lambda keys: dispatcher.dispatch_many([(k, TOOLS_QUEUE) for k in keys]),
            lambda keys: dispatcher.send_attempt(keys[0], attempt=1, queue=TOOLS_QUEUE),
        ),
    }


def measure(ours: Ours, size: int, samples: int, warm: int = 10) -> dict[str, Any]:
    """p50 of each part, turn and one call alternating, and the client's CPU per call."""
    out: dict[str, Any] = {}
    for name, part in parts(ours).items():
        times: dict[str, list[float]] = {"turn": [], "one": []}
        cpu = {"turn": 0.0, "one": 0.0}
        for n in range(warm + samples):
            for side, calls, do in (("turn", size, part.turn), ("one", 1, part.one)):
                given = part.make(calls)
                cpu_before, began = own_cpu_s(), time.perf_counter()
                do(given)
                took = time.perf_counter() - began
                if n >= warm:
                    times[side].append(took * 1000)
                    cpu[side] += own_cpu_s() - cpu_before
        turn_p50, one_p50 = statistics.median(times["turn"]), statistics.median(times["one"])
        out[name] = {
            "turn_p50_ms": turn_p50,
            "one_p50_ms": one_p50,
            "ratio": turn_p50 / one_p50,
            "turn_cpu_ms_per_call": cpu["turn"] * 1000 / (samples * size),
            "one_cpu_ms_per_call": cpu["one"] * 1000 / samples,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.turn_parts", description=__doc__)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--turn", type=int, default=TURN)
    parser.add_argument("--samples", type=int, default=SAMPLES)
    args = parser.parse_args(argv)
    ours = Ours(bench_settings(args.redis_url))
    try:
        got = measure(ours, args.turn, args.samples)
    finally:
        dispatcher = ours.boundary.dispatcher
        if isinstance(dispatcher, CeleryDispatcher):
            dispatcher.sent_events.flush(10)
        for db in (STORE_DB, BROKER_DB):
            redis.Redis.from_url(db_url(args.redis_url, db)).flushdb()
    json.dump({"turn": args.turn, "samples": args.samples, "parts": got}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
