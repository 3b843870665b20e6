"""``python -m bench.studies.ceiling`` and ``python -m bench.studies.scaling`` with tiny sizes, so
the measures behind docs/explanation/scaling.md cannot rot: every figure is there and positive,
the store steps the ceiling drives leave sealed records behind them (they are the store's real
scripts), and the bench's DBs are left empty. No timing is checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.studies.ceiling import CALLS_PER_RUN, Driver
from bench.suite.config import BROKER_DB, STORE_DB
from boundary.store import keys
from tests.bench.runner import ROOT, SERVER, positive
from tests.conftest import CI, REDIS_HOST, REDIS_PORT, require_service

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600 if CI else 300)]


def _run(module: str, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    command = [sys.executable, "-m", module, "--redis-url", SERVER, *args]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=540, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _empty(db: int) -> bool:
    with redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db) as client:
        return client.dbsize() == 0


def test_one_round_of_the_ceiling_driver_seals_every_call_and_hears_every_seal() -> None:
    # Given the store's DB of the bench's server, empty
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    store = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=STORE_DB, decode_responses=True)
    store.flushdb()
    try:
        driver = Driver(SERVER, batch=2 * CALLS_PER_RUN, mode="full", message=b"{}")

        # When it runs one round of 20 calls, broker traffic included
        driver.round(0)

        # Then every call's record is sealed READY with the no-op result, by the store's scripts
        calls = driver.keys_of(0)
        for key in calls:
            record = store.hgetall(keys.record_key(key))
            assert record["status"] == "READY", record
            assert record["agent_result"] == '{"ok":true}'
        assert driver.calls == 20
        # And the broker's queues it pushed to were drained as a worker would
        with redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=BROKER_DB) as broker:
            assert broker.llen("ceiling_execute") == 0
            assert broker.hlen("unacked") == 0
    finally:
        store.flushdb()
        with redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=BROKER_DB) as broker:
            broker.flushdb()


def test_ceiling_reports_calls_and_redis_cpu_per_call_for_both_modes() -> None:
    require_service("Redis", REDIS_HOST, REDIS_PORT)

    got = _run(
        "bench.studies.ceiling",
        "--processes",
        "1,2",
        "--seconds",
        "1",
        "--batch",
        "10",
        "--modes",
        "store,full,inline",
    )

    assert positive(got["task_message_bytes"])
    for mode in ("store", "full", "inline"):
        assert [row["processes"] for row in got[mode]] == [1, 2]
        for row in got[mode]:
            for name in ("calls", "calls_per_s", "redis_cpu_ms_per_call", "ceiling_calls_per_s"):
                assert positive(row[name]), (mode, name, row)
    assert _empty(STORE_DB) and _empty(BROKER_DB)


def test_scaling_reports_each_worker_count(tmp_path: Path) -> None:
    require_service("Redis", REDIS_HOST, REDIS_PORT)

    got = _run(
        "bench.studies.scaling",
        "--workers",
        "1,2",
        "--concurrency",
        "2",
        "--calls",
        "20",
        "--repetitions",
        "1",
        "--rounds",
        "1",
        "--warmup",
        "10",
        "--out",
        str(tmp_path),
    )

    assert [row["workers"] for row in got["rows"]] == [1, 2]
    for row in got["rows"]:
        for name in ("calls_per_s", "worker_cpu_ms", "client_cpu_ms", "redis_cpu_ms"):
            assert positive(row[name]), (name, row)
    assert got["rows"][0]["over_one_worker"] == 1.0
    assert _empty(STORE_DB)


def test_onehop_measures_both_workers_in_pairs(tmp_path: Path) -> None:
    # Given our worker and the one-hop proposal's (the project step in line, bench.studies.onehop)
    require_service("Redis", REDIS_HOST, REDIS_PORT)

    # When both are measured with tiny sizes
    got = _run(
        "bench.studies.onehop",
        "--pools",
        "threads:2",
        "--calls",
        "20",
        "--repetitions",
        "2",
        "--samples",
        "4",
        "--out",
        str(tmp_path),
    )

    # Then every call of both ended READY (a failed one fails the run) and each figure is there
    (pool,) = got["pools"]
    for name in ("ours", "onehop"):
        assert len(pool[f"{name}_per_s"]) == 2
        assert all(positive(v) for v in pool[f"{name}_worker_cpu_ms"])
    assert pool["throughput_ratio"]["n"] == 2
    for name in ("onehop_call_p50_ms", "ours_call_p50_ms", "call_p50_ratio"):
        assert name in pool["sequential"]
    assert _empty(STORE_DB)


def test_reproject_memory_reports_every_process_peak_at_each_size(tmp_path: Path) -> None:
    # Given the bench's DBs of the suite's Redis
    require_service("Redis", REDIS_HOST, REDIS_PORT)

    # When the memory study runs both commands on two tiny stores, one worker per queue
    got = _run(
        "bench.studies.reproject_memory",
        "--records",
        "20,40",
        "--calls",
        "10",
        "--processes",
        "1",
        "--pool",
        "threads:2",
        "--out",
        str(tmp_path),
        "--json",
    )

    # Then each size has both commands' peaks (each command ended with exit 0) and each
    # worker's, never below what it held when it started, and the DBs are left empty
    assert [size["records"] for size in got] == [20, 40]
    for size in got:
        for command in ("sealed", "current"):
            assert size[command]["exit"] == 0, size[command]
            assert positive(size[command]["max_rss_mb"])
            assert size[command]["redis_out_buffer_peak_mb"] >= 0
        assert len(size["workers_peak_mb"]) == 2
        for name, peaks in size["workers_peak_mb"].items():
            assert peaks and max(peaks) >= max(size["workers_ready_mb"][name])
    assert (tmp_path / "reproject_memory.json").exists()
    assert _empty(STORE_DB)
