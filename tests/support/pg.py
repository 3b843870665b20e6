"""PostgreSQL for the report tool's tests: a scratch database per use, dropped afterwards.

Locally a missing psycopg or server skips the tests; under CI (``CI`` set) it fails them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from bench.studies.pg_tools import ALL_REPORTS
from examples import pgreport
from examples.pgreport_demo import create_demo_table
from tests.conftest import CI, require_service
from tests.support.settings import SUITE

__all__ = ["ALL_REPORTS"]

#: Rows of the scratch databases' demo table.
DEMO_ROWS = 20_000
#: A function a report could call that writes: the read-only guards must refuse it.
WRITING_FUNCTION_SQL = """
CREATE TABLE written (n integer);
CREATE FUNCTION write_one() RETURNS integer LANGUAGE sql VOLATILE
    AS 'INSERT INTO written VALUES (1) RETURNING n';
"""


def require_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        problem = "psycopg is not installed (pip install -e '.[postgres]')"
        if CI:
            pytest.fail(problem)
        pytest.skip(problem)
    return psycopg


def admin_connection() -> Any:
    psycopg = require_psycopg()
    info = psycopg.conninfo.conninfo_to_dict(SUITE.pg_dsn)
    require_service("PostgreSQL", str(info.get("host", "127.0.0.1")), int(info.get("port", 5432)))
    return psycopg.connect(SUITE.pg_dsn, autocommit=True)


@contextmanager
def scratch_database(rows: int = DEMO_ROWS) -> Iterator[str]:
    """A new database with the demo table and a writing function; yields its DSN."""
    psycopg = require_psycopg()
    name = f"{SUITE.pg_db_prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(SUITE.pg_dsn, dbname=name)
    try:
        with psycopg.connect(dsn) as conn:
            create_demo_table(conn, rows)
            conn.execute(WRITING_FUNCTION_SQL)
        yield dsn
    finally:
        with admin_connection() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: How the report transaction's set-up statements start (``tests.support.pg.running_statements``).
_SET_UP = ("BEGIN", "SELECT SET_CONFIG", "DECLARE")


def running_statements(dsn: str) -> list[tuple[int, str]]:
    """(pid, query) of the report tool's statements running on ``dsn``'s database. The
    transaction's set-up (``BEGIN``, ``set_config``, the cursor's ``DECLARE``) is active for a
    moment before the report's statement runs: none of it counts (a poll that lands in that
    moment would otherwise take it for the report)."""
    psycopg = require_psycopg()
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with admin_connection() as admin:
        rows = admin.execute(
            "SELECT pid, query FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = %s AND state = 'active'",
            (dbname, pgreport.APPLICATION_NAME),
        ).fetchall()
    return [
        (int(pid), str(query))
        for pid, query in rows
        if not str(query).lstrip().upper().startswith(_SET_UP)
    ]


def table_rows(dsn: str, table: str) -> int:
    psycopg = require_psycopg()
    with psycopg.connect(dsn) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
