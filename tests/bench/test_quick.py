"""The benchmark's smoke run (``python -m bench --quick --json``) against the test Redis, so
the benchmark cannot rot: every B1-B6 figure is there and of a sane type. Its values are not
checked against the targets; the machines are too noisy for that (see bench/README.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.suite.run import PHASES
from tests.bench.runner import SERVER, positive, run_bench
from tests.conftest import CI, REDIS_HOST, REDIS_PORT, require_service

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900 if CI else 240)]


def _quick_run(out: Path) -> dict[str, Any]:
    return run_bench(
        "--quick",
        "--json",
        "--redis-url",
        SERVER,
        "--out",
        str(out),
        # B1 also measures the ablation (bench.peers.inline), so its worker cannot rot either.
        "--ablate",
        # Locally a full benchmark may be running on the same DBs: skip rather than wait.
        "--lock-wait",
        "600" if CI else "60",
        # B9 starts a fleet of its own: tests/bench/test_live_during_job.py runs it.
        "--only",
        ",".join(phase for phase in PHASES if phase != "b9"),
        timeout=840,
    )


def test_quick_benchmark_reports_every_figure_with_sane_types(tmp_path: Path) -> None:
    # Given a reachable Redis
    require_service("Redis", REDIS_HOST, REDIS_PORT)

    # When the quick benchmark runs
    document = _quick_run(tmp_path)

    # Then every B1..B6 figure is there, a number where a number belongs
    figures = document["figures"]
    for name in (
        "b1_threads_ratio",
        "b1_threads_cpu_ratio",
        "b1_threads_ours_per_s",
        "b1_threads_bare_per_s",
        "b1_threads_defaults_ratio",
        "b1_threads_defaults_per_s",
        "b1_threads_system_cpu_ratio",
        "b1_threads_inline_ratio",
        "b1_threads_inline_per_s",
        # Like for like: the fair peer with our worker's event spacing
        "b1_threads_bare_spaced_ratio",
        "b1_threads_bare_spaced_per_s",
        "b2_ping_p50_ms",
        "b2_submit_p50_ms",
        "b2_apply_async_p50_ms",
        "b2_submit_over_ping_p50",
        "b2_submit_over_ping_p99",
        "b2_submit_over_apply_async_p50",
        "b2_submit_over_apply_async_p99",
        "b2_call_over_bare_call_p50",
        "b2_call_over_defaults_call_p50",
        "b2_call_over_bare_spaced_call_p50",
        "b3_store_commands_per_call",
        "b3_store_lua_commands_per_call",
        "b3_caller_store_round_trips_per_call",
        "b3_celery_commands_per_call",
        "b3_bare_celery_commands_per_call",
        "b4_round_trips",
        "b4_time_over_pipeline",
        "b5_runs_per_s",
        "b6_run_keys_bytes_per_call",
        "b6s_bytes_per_record",
        "b6s_reaper_s",
        "b6s_runs_command_s",
        # B7's stall at each quick in-flight count (20, 60), resources at the largest
        "b7_20_tick_lateness_max_ms",
        "b7_60_tick_lateness_max_ms",
        "b7_60_longest_step_cpu_ms",
        "b7_60_rss_peak_growth_mib",
        "b7_60_sockets_peak",
        "b7_20_runs",
    ):
        assert positive(figures.get(name)), (name, figures.get(name))
    assert isinstance(figures["b4_round_trips"], int)
    assert figures["b6_memory_over_payload"]
    assert all(positive(v) for v in figures["b6_memory_over_payload"].values())

    # And B1 measured the Redis server's CPU and the workers' context switches, per call,
    # for every side (the ablation's worker included)
    results = document["results"]
    b1 = next(iter(results["b1"].values()))
    for side in ("ours", "bare", "defaults", "inline", "bare_spaced"):
        for sample in b1[side]:
            assert positive(sample["redis_cpu_ms"]), (side, sample)
            assert positive(sample["worker_switches"]), (side, sample)

    # And the counts are plausible: the store's commands are told apart from Celery's
    assert 1 <= figures["b3_store_commands_per_call"] <= 20
    # The bare side's calls never touch the store: a call that did would count one command a
    # call at least. What MONITOR can still see on the store's DB in the bare side's window
    # is our worker's (its last acks' follow-ups, its periodic work), which is not the bare
    # side's and lands there or not depending on timing (0.05 a call = 1 command in 20).
    assert results["b3"]["bare"]["store_commands_per_call"] < 1
    assert 1 <= figures["b4_round_trips"] <= 10
    assert results["b5"]["failed"] == 0
    assert results["b5"]["facts"] == results["b5"]["runs"] * results["b5"]["calls_per_run"]
    # B5 says the reprocessing workers it ran on beside its figure
    assert figures["b5_workers"] == "2 x threads c=4"
    # And the run says the Redis persistence it ran with
    assert set(document["meta"]["persistence"]) == {"appendonly", "appendfsync", "save"}
    scale = results["b6_scale"]
    assert scale["reaper_found"] == scale["pending_calls"]
    assert scale["run_ids_found"] == scale["runs"] + scale["pending_calls"] // 10
    assert scale["scan_run_ids_found"] == scale["run_ids_found"]  # the index lists them all

    # And every target has a row, and the report files are written
    assert {row["figure"] for row in document["targets"]} >= {
        "b1_threads_ratio",
        "b2_call_over_bare_call_p50",
        "b2_submit_over_apply_async_p50",
        "b3_store_commands_per_call",
        "b4_round_trips",
        "b5_runs_per_s",
        "b7_200_tick_lateness_max_ms",
        "b7_60_runs_under_50_ms",
    }
    for name in ("bench.json", "b1_b2.png", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
