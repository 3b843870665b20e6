"""The PostgreSQL demo table scales past the integer range: ``--rows 500000`` used to end in a
``NumericValueOutOfRange`` traceback. It fills in committed chunks; what it refuses is one line."""

from __future__ import annotations

import subprocess
import sys

from examples.pgreport_demo import MAX_ROWS, create_demo_table
from tests.celery.workers import ROOT
from tests.support.pg import require_psycopg, scratch_database


def demo_table(*args: str, dsn: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.pgreport_demo", *args, *(["--dsn", dsn] if dsn else [])],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_half_a_million_rows_in_chunks_with_ids_past_the_integer_range() -> None:
    psycopg = require_psycopg()
    with scratch_database(rows=1) as dsn, psycopg.connect(dsn) as conn:
        done: list[int] = []
        create_demo_table(conn, 500_000, on_chunk=done.append, chunk_rows=200_000)
        assert done == [200_000, 400_000, 500_000]
        count, slow, last = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE latency_ms >= 5000), max(id) FROM request_log"
        ).fetchone()
        assert (count, last) == (500_000, 500_000)
        assert slow == 500_000 // 211


def test_what_it_refuses_is_one_line_without_a_traceback() -> None:
    with scratch_database(rows=1) as dsn:
        for rows in ("0", str(MAX_ROWS + 1)):
            done = demo_table("--rows", rows, dsn=dsn)
            assert done.returncode == 2
            assert "--rows must be from 1 to" in done.stderr.splitlines()[-1]
            assert "Traceback" not in done.stderr
    secret = "postgresql://postgres:s3cret-pw@127.0.0.1:1/none"
    done = demo_table("--rows", "10", dsn=secret)
    assert done.returncode == 3  # the server, as its docstring says (it was 1)
    assert done.stderr == "error: cannot connect to the database (check the DSN)\n"
