"""``python -m bench.studies.ceiling_turns``: how many calls a second one Redis server
sustains when an agent hands its calls over in turns of ``--turn`` calls
(``ToolBoundary.invoke_many``), next to the same calls one by one (``bench.studies.ceiling``'s
drivers, ``--batch 1``), in one run.

A turn's driver sends what ``invoke_many`` sends: ONE subscription of the run's channel, ONE
``create_many.lua`` for the turn's calls, and (``--modes full``) ONE pipeline of the turn's
execute messages; then every call's own round trips as a worker and the waiter make them,
one by one (the workers run the calls one by one; the task-sent events go one by one from
the dispatcher's events thread). The one-by-one driver is ``bench.studies.ceiling.Driver``, each
round one call. Both report calls/s, the Redis server's CPU per call and the ceiling it
gives (a core's worth of calls). The bench's store DB (3) and broker DB (4) are flushed
before and after, under the bench's lock.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Any

import redis

from bench.peers.tools import NOOP
from bench.studies.ceiling import (
    REQUEST,
    SECONDS,
    Driver,
    Step,
    run_drivers,
    task_message,
)
from bench.studies.ceiling import measure as measure_singles
from bench.suite.config import BROKER_DB, DEFAULT_REDIS_URL, STORE_DB, db_url
from bench.suite.lock import exclusive
from bench.suite.meta import commit, load
from boundary.models import CanonicalKey
from boundary.store import keys
from boundary.store.turns import CREATE_MANY, create_many_args

#: Calls of a turn (a model turn's parallel tool calls).
TURN = 8
#: What each call is created with (``bench.studies.ceiling``'s calls are created with the same).
CREATE_TERMS: Any = {
    "tool_name": NOOP,
    "request": REQUEST,
    "deadline": None,
    "max_pending_s": 600,
    "reap_grace_s": 60,
    "max_run_calls": None,
    "max_tool_calls": None,
}


class TurnDriver(Driver):
    """One process's turns: each round is one turn of ``turn`` calls of one run."""

    def __init__(self, server_url: str, turn: int, mode: str, message: bytes) -> None:
        super().__init__(server_url, turn, mode, message)
        self.create_many = self.store.register_script(CREATE_MANY)

    def keys_of(self, round_no: int) -> list[CanonicalKey]:
        run_id = f"turn-{self.token}-{round_no}"
        return [CanonicalKey(run_id=run_id, tool_call_id=f"call_{n}") for n in range(self.batch)]

    def round(self, round_no: int) -> None:
        calls = self.keys_of(round_no)
        self.waiter.subscribe(keys.sealed_channel(calls[0].run_id))
        # The turn's create: ONE script for its calls.
        run_keys, argv = create_many_args(
            [(key, CREATE_TERMS) for key in calls], ttl_ms=600_000, index=True
        )
        self.create_many(keys=run_keys, args=argv)
        steps = self.steps()[1:]  # every call's round trips after its create
        if self.mode != "store":
            # The turn's execute messages: ONE pipeline.
            send, steps = steps[0], steps[1:]
            pipe = self.broker.pipeline(transaction=False)
            for key in calls:
                send[1](pipe, key)
            pipe.execute()
        for key in calls:
            for client, step in steps:
                self._one(client, step, key)
        self.waiter.unsubscribe(keys.sealed_channel(calls[0].run_id))
        self.calls += len(calls)

    def _one(self, client: Any, step: Step, key: CanonicalKey) -> None:
        pipe = client.pipeline(transaction=False)
        step(pipe, key)
        pipe.execute(raise_on_error=False)
        if step == self.seal:
            self.hear(1)


def measure(
    server_url: str, processes: int, seconds: float, turn: int, mode: str, message: bytes
) -> dict[str, Any]:
    """``processes`` turn drivers for ``seconds`` (after ``WARMUP_S``): calls/s and Redis CPU."""
    make = functools.partial(TurnDriver, server_url, turn, mode, message)
    return {"turn": turn, **run_drivers(server_url, processes, seconds, make)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.studies.ceiling_turns", description=__doc__
    )
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--processes", default="1,2,4", help="driver counts, in turn")
    parser.add_argument("--modes", default="store,full", help="store, full (comma-separated)")
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--turn", type=int, default=TURN, help="calls a turn")
    parser.add_argument("--lock-wait", type=float, default=600.0)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    given = sys.argv[1:] if argv is None else argv
    out: dict[str, Any] = {"command": " ".join(["python -m bench.studies.ceiling_turns", *given])}
    out |= {"commit": commit(), "turn": args.turn, "seconds": args.seconds}
    out["load_before"] = load()
    with exclusive(args.redis_url, args.lock_wait):
        flush = [redis.Redis.from_url(db_url(args.redis_url, db)) for db in (STORE_DB, BROKER_DB)]
        for client in flush:
            client.flushdb()
        try:
            message = task_message(args.redis_url)
            out["task_message_bytes"] = len(message)
            for mode in args.modes.split(","):
                pairs = []
                for n in counts:
                    single = measure_singles(args.redis_url, n, args.seconds, 1, mode, message)
                    for client in flush:
                        client.flushdb()
                    turns = measure(args.redis_url, n, args.seconds, args.turn, mode, message)
                    for client in flush:
                        client.flushdb()
                    pairs.append({"one_by_one": single, "turns": turns})
                out[mode] = pairs
        finally:
            for client in flush:
                client.flushdb()
    out["load_after"] = load()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
