"""``python -m bench.studies.steps`` (a call's two worker steps in one process, tool threads against
the calling thread; quoted in bench/README.md) runs against a real Redis and leaves no key."""

from __future__ import annotations

import redis

from bench.studies.steps import compare_packing, measure
from tests.conftest import REDIS_HOST, REDIS_PORT, STORE_DB, redis_url, require_service


def test_the_steps_benchmark_measures_both_sides_and_deletes_what_it_wrote() -> None:
    # Given the suite's store DB
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    client = redis.Redis.from_url(redis_url(STORE_DB))

    # When the steps benchmark runs a small round per side
    figures = measure(redis_url(STORE_DB), calls=20, rounds=2)

    # Then each side has a CPU and wall time per call, and every call ended READY (else it
    # raises); the hand-offs' cost is the difference of the two sides
    for side in ("threads", "watchdog", "inline"):
        assert figures[f"{side}_cpu_ms"] > 0
        assert figures[f"{side}_wall_ms"] > 0
    assert figures["handoffs_cpu_ms"] == figures["threads_cpu_ms"] - figures["inline_cpu_ms"]
    assert figures["watchdog_over_inline_cpu_ms"] == (
        figures["watchdog_cpu_ms"] - figures["inline_cpu_ms"]
    )

    # And none of its runs' keys, nor index entries, are left behind
    assert list(client.scan_iter(match="*steps-*", count=1000)) == []
    for index in ("tb:runs", "tb:pending-runs"):
        members = client.zrange(index, 0, -1)
        assert not [m for m in members if m.startswith(b"steps-")]


def test_the_packing_comparison_runs_both_packers_and_deletes_what_it_wrote() -> None:
    # Given the suite's store DB
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    client = redis.Redis.from_url(redis_url(STORE_DB))

    # When the steps run with the store's packer and with redis-py's, a small round each
    figures = compare_packing(redis_url(STORE_DB), calls=20, rounds=2)

    # Then each packer has a CPU time a call over both rounds (every call ended READY, else
    # it raises), and what the store's packer saves is their difference
    for name in ("hiredis", "redis_py"):
        assert figures[f"{name}_cpu_ms"] > 0
        assert len(figures[f"{name}_rounds_cpu_ms"]) == 2
    assert figures["saved_cpu_ms"] == figures["redis_py_cpu_ms"] - figures["hiredis_cpu_ms"]
    # And none of its runs' keys are left behind
    assert list(client.scan_iter(match="*steps-*", count=1000)) == []
