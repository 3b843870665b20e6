"""``python -m bench.studies.round_trips`` with tiny sizes, counting only (no delays, no
timing): every side's legs are counted, and the counts that do not depend on the idle
workers' polling are the numbers the table in bench/README.md explains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.studies.round_trips import LEGS, SIDE_NAMES, table
from bench.suite.config import BROKER_DB, STORE_DB
from tests.bench.runner import ROOT, SERVER
from tests.conftest import CI, REDIS_HOST, REDIS_PORT, require_service

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600 if CI else 300)]


def _study(tmp_path: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    command = [
        sys.executable,
        "-m",
        "bench.studies.round_trips",
        "--redis-url",
        SERVER,
        "--pools",
        "threads:2",
        "--calls",
        "10",
        "--samples",
        "0",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=540, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_round_trips_of_one_call_per_leg_ours_against_the_peers(tmp_path: Path) -> None:
    require_service("Redis", REDIS_HOST, REDIS_PORT)

    document = _study(tmp_path)

    sides = document["pools"][0]["sides"]
    assert sorted(sides) == sorted(SIDE_NAMES)
    legs = {name: side["counted"]["legs"] for name, side in sides.items()}
    for name in SIDE_NAMES:
        assert sorted(legs[name]) == sorted(LEGS)

    # The caller's legs have no background: exact counts. Every side sends its message and
    # its task-sent event (LPUSH, PUBLISH): two round trips to the broker.
    for name in SIDE_NAMES:
        assert legs[name]["caller.broker"]["round_trips"] == 2.0, name
        assert legs[name]["caller.broker"]["commands"] == {"LPUSH": 1.0, "PUBLISH": 1.0}
    # Ours creates the record in one script and hears its seal on the store's Pub/Sub.
    for name in ("ours", "onehop"):
        store = legs[name]["caller.store"]
        assert store["commands"]["EVALSHA"] == 1.0
        assert store["commands"]["(push)"] == 1.0
        assert legs[name]["caller.backend"]["round_trips"] == 0.0
    # The peers wait on Celery's result backend instead.
    for name in ("bare", "bare_one"):
        assert legs[name]["caller.store"]["round_trips"] == 0.0
        assert legs[name]["caller.backend"]["commands"]["GET"] == 1.0

    # The workers': ours' worker makes fewer round trips to Redis during a call than the
    # peer of the same shape (its store scripts replace the result backend's writes and
    # reads, and its events go out in batches).
    def worker(name: str) -> float:
        return sum(legs[name][f"worker.{s}"]["round_trips"] for s in ("store", "broker", "backend"))

    assert worker("ours") < worker("bare")
    assert worker("onehop") < worker("bare_one")
    # The chain's second task is a second delivery: two wake-ups, one in one hop.
    assert round(legs["ours"]["worker.broker"]["wakeups"]) == 2
    assert round(legs["onehop"]["worker.broker"]["wakeups"]) == 1

    # The table renders every side.
    rendered = table([document])
    assert rendered.count("\n") == len(SIDE_NAMES) + 1

    for db in (STORE_DB, BROKER_DB):
        with redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db) as client:
            assert client.dbsize() == 0
