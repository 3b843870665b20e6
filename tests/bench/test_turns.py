"""``python -m bench --quick --only b8`` runs B8 (a model turn's calls in one round trip
against the same calls one by one; a turn of calls of a 50 ms tool against one such call) to
its end on real workers and reports its figures with sane types. Its values are not checked
against the targets (the machines are too noisy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.runner import SERVER, run_bench
from tests.conftest import CI, REDIS_HOST, REDIS_PORT, require_service

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600 if CI else 240)]


def test_b8_reports_turn_submit_latency_and_throughput_figures(tmp_path: Path) -> None:
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    document = run_bench(
        *("--quick", "--json", "--only", "b8", "--redis-url", SERVER, "--out", str(tmp_path)),
        # (two worker processes of ours, as the docs recommend one a core)
        *("--b8-processes", "2"),
        *("--lock-wait", "600" if CI else "60"),
        timeout=540,
    )
    b8 = document["results"]["b8"]
    assert b8["processes"] == 2
    submit, latency, rate = b8["submit"], b8["latency"], b8["throughput"]
    assert submit["size"] == 8
    assert submit["turn_submit_p50_ms"] > 0 and submit["one_submit_p50_ms"] > 0
    assert submit["ratio"] == submit["turn_submit_p50_ms"] / submit["one_submit_p50_ms"]
    assert len(rate["turns_calls_per_s"]) == len(rate["one_by_one_calls_per_s"]) == 3
    assert all(value > 0 for value in rate["turns_calls_per_s"] + rate["one_by_one_calls_per_s"])
    assert rate["spread"][0] <= rate["ratio"] <= rate["spread"][1]
    assert isinstance(submit["met"], bool) and isinstance(latency["met"], bool)
    # A turn of 8 calls of the 50 ms tool and one such call: each took the tool's time at least
    assert latency["size"] == 8
    assert latency["turn_p50_ms"] >= 50 and latency["one_p50_ms"] >= 50
    assert latency["ratio"] == latency["turn_p50_ms"] / latency["one_p50_ms"]
    # And the CPU a turn and a call took the workers (both processes) is there to say what
    # a turn adds
    assert latency["worker_cpu_ms"]["turn"] is not None
    # And the Redis CPU a call, in turns over one by one, is measured
    assert rate["redis_cpu_ratio"] > 0
