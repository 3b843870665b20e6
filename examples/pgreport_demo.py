"""Creates the demo table the ``sql_report`` tool reads: ``python -m examples.pgreport_demo``.

Setup only, run by a person (or a test) with a role that may write: the tool itself never
writes. Uses ``TOOL_BOUNDARY_EXAMPLE_PG_DSN`` (or ``--dsn``) and replaces ``request_log``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

#: Rows the demo table gets by default.
DEFAULT_ROWS = 200_000

#: The demo table: one row per request to one of five services, over the last week. The
#: values are a pure function of the id, so every database built with N rows is the same.
CREATE_SQL = """
DROP TABLE IF EXISTS request_log;
CREATE TABLE request_log (
    id bigint PRIMARY KEY,
    at timestamptz NOT NULL,
    service text NOT NULL,
    route text NOT NULL,
    status integer NOT NULL,
    latency_ms integer NOT NULL
);
"""
FILL_SQL = """
INSERT INTO request_log
SELECT i,
       timestamptz '2026-11-27 00:00:00+00' + i * interval '1 second' * (604800.0 / %(rows)s),
       (ARRAY['api', 'billing', 'search', 'auth', 'reports'])[1 + i %% 5],
       (ARRAY['/v1/items', '/v1/orders', '/v1/users', '/health'])[1 + (i / 5) %% 4],
       CASE WHEN i %% 97 = 0 THEN 503 WHEN i %% 41 = 0 THEN 500 ELSE 200 END,
       (i * 7919) %% 1000 + CASE WHEN i %% 211 = 0 THEN 5000 ELSE 0 END
FROM generate_series(1, %(rows)s) AS i
"""


def create_demo_table(conn: Any, rows: int = DEFAULT_ROWS) -> None:
    """(Re)creates ``request_log`` with ``rows`` rows on a psycopg connection and commits."""
    conn.execute(CREATE_SQL)
    conn.execute(FILL_SQL, {"rows": rows})
    conn.execute("ANALYZE request_log")
    conn.commit()


def main(argv: list[str] | None = None) -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--dsn", default=os.environ.get("TOOL_BOUNDARY_EXAMPLE_PG_DSN"))
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("give --dsn or set TOOL_BOUNDARY_EXAMPLE_PG_DSN")
    with psycopg.connect(args.dsn) as conn:
        create_demo_table(conn, args.rows)
    print(f"request_log: {args.rows} rows")


if __name__ == "__main__":
    main()
