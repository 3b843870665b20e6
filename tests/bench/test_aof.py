"""``python -m bench --redis-aof always`` runs on a private redis-server of its own with an
append-only file fsynced at every write, and says so in the run's meta."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.runner import run_bench
from tests.support.servers import redis_server_binary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_bench_runs_on_an_aof_server_of_its_own_and_records_it(tmp_path: Path) -> None:
    # Given redis-server is installed
    redis_server_binary()

    # When a quick B1/B2 runs with --redis-aof always
    document = run_bench(
        *("--quick", "--json", "--only", "b1,b2", "--pools", "threads:2"),
        *("--redis-aof", "always", "--out", str(tmp_path)),
        timeout=240,
    )

    # Then it ran on an append-only file fsynced at every write, and measured both peers
    assert document["meta"]["persistence"]["appendonly"] == "yes"
    assert document["meta"]["persistence"]["appendfsync"] == "always"
    assert document["figures"]["b1_threads_bare_spaced_ratio"] > 0
    # And its server's files are gone with it
    assert not (tmp_path / "redis-aof").exists()
