"""``python -m bench --peers dbos`` with tiny sizes, so the DBOS comparison cannot rot: DBOS's
worker starts on a database the bench makes, both DBOS sides (10 ms polling and DBOS's
defaults) answer, every figure is there, and the database is gone afterwards. Values are not
checked against the targets (the machines are too noisy; see bench/README.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.bench.runner import SERVER, positive, run_bench
from tests.conftest import CI, REDIS_HOST, REDIS_PORT, require_service
from tests.support.pg import admin_connection
from tests.support.settings import SUITE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600 if CI else 300)]


def _require_dbos() -> None:
    try:
        import dbos  # noqa: F401
    except ImportError:
        if CI:
            pytest.fail("dbos is not installed (pip install -e '.[dev]')")
        pytest.skip("dbos is not installed (pip install -e '.[dbos]')")


def _run(out: Path, prefix: str) -> dict[str, Any]:
    return run_bench(
        "--quick",
        "--json",
        "--only",
        "dbos",
        "--peers",
        "dbos",
        "--pg-url",
        SUITE.pg_dsn,
        "--pg-db-prefix",
        prefix,
        "--redis-url",
        SERVER,
        "--out",
        str(out),
        "--lock-wait",
        "600" if CI else "60",
        timeout=540,
    )


def test_dbos_peer_reports_every_figure_and_drops_its_database(tmp_path: Path) -> None:
    # Given Redis, PostgreSQL and DBOS
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    _require_dbos()
    with admin_connection():
        pass
    prefix = f"{SUITE.pg_db_prefix}_bench_dbos"

    # When the quick benchmark compares ours with DBOS
    document = _run(tmp_path, prefix)

    # Then both DBOS sides answered every call, with every figure a positive number
    figures = document["figures"]
    for side in ("dbos", "dbos_defaults"):
        for name in (
            "ratio",
            "ours_per_s",
            "per_s",
            "call_p50_ratio",
            "submit_p50_ratio",
            "ours_call_p50_ms",
            "call_p50_ms",
            "call_p99_ms",
            "submit_p50_ms",
        ):
            assert positive(figures.get(f"{side}_{name}")), (side, name, figures)
    pool = next(iter(document["results"]["dbos"].values()))
    assert pool["polling_s"] == {"dbos": 0.01, "dbos_defaults": 1.0}
    # And the DBOS worker's CPU and its database's server CPU were measured per call
    for sample in pool["sides"]["dbos"]["throughput"]["peer"]:
        assert positive(sample["worker_cpu_ms"]), sample
        assert positive(sample["server_cpu_ms"]), sample
    # And every ratio is quoted with its spread
    ratio = pool["sides"]["dbos"]["throughput"]["ratio"]
    assert ratio["min"] <= ratio["median"] <= ratio["max"]
    # And the targets name the DBOS comparison
    assert {"dbos_ratio", "dbos_call_p50_ratio"} <= {row["figure"] for row in document["targets"]}

    # And the bench's database is gone
    with admin_connection() as admin:
        left = admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{prefix}%",)
        ).fetchall()
    assert left == []


def test_a_dbos_worker_is_not_ready_on_an_earlier_runs_ready_line(tmp_path: Path) -> None:
    # Given a log dir kept from an earlier run (the same --out): its worker log says ready
    _require_dbos()
    from bench.peers.dbos_side import DbosWorkerProcess
    from bench.peers.dbos_worker import READY_LINE
    from bench.rig.workers import Pool

    (tmp_path / "dbos-threads1.log").write_text(f"an earlier run\n{READY_LINE}\n")
    # When a worker starts that cannot launch (no database answers on port 1)
    worker = DbosWorkerProcess(
        name="dbos",
        db_url="postgresql://postgres@127.0.0.1:1/none",
        queue="dbos",
        pool=Pool("threads", 1),
        polling_s=0.1,
        log_dir=tmp_path,
    )
    try:
        # Then it is not taken for ready: its own exit is reported, with its own log's tail
        with pytest.raises(RuntimeError, match="did not start") as failed:
            worker.await_ready()
        assert "an earlier run" not in str(failed.value)
    finally:
        worker.stop()
