"""Creates the demo table the ``sql_report`` tool reads: ``python -m examples.pgreport_demo``.

Setup only, run by a person (or a test) with a role that may write: the tool itself never
writes. Uses ``TOOL_BOUNDARY_EXAMPLE_PG_DSN`` (or ``--dsn``) and replaces ``request_log``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, NoReturn

#: Rows the demo table gets by default.
DEFAULT_ROWS = 200_000
#: Most rows it may get (a day of a busy service is tens of millions; 10 GiB of table is
#: about 150 million).
MAX_ROWS = 200_000_000
#: Rows inserted per statement (each commits, and a line reports the count).
CHUNK_ROWS = 2_000_000

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
#: Rows ``first`` to ``last``. The ids are bigint all through (``i * 7919`` passes the
#: integer range past 271,000 rows: an ``integer`` series made 500,000 rows fail).
FILL_SQL = """
INSERT INTO request_log
SELECT i,
       timestamptz '2026-11-27 00:00:00+00' + i * interval '1 second' * (604800.0 / %(rows)s),
       (ARRAY['api', 'billing', 'search', 'auth', 'reports'])[1 + i %% 5],
       (ARRAY['/v1/items', '/v1/orders', '/v1/users', '/health'])[1 + (i / 5) %% 4],
       CASE WHEN i %% 97 = 0 THEN 503 WHEN i %% 41 = 0 THEN 500 ELSE 200 END,
       (i * 7919) %% 1000 + CASE WHEN i %% 211 = 0 THEN 5000 ELSE 0 END
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
"""


def create_demo_table(
    conn: Any, rows: int = DEFAULT_ROWS, on_chunk: Any = None, chunk_rows: int = CHUNK_ROWS
) -> None:
    """(Re)creates ``request_log`` with ``rows`` rows on a psycopg connection, a chunk per
    transaction (``on_chunk(done)`` after each), then ANALYZE.

    Raises:
        ValueError: ``rows`` is not from 1 to ``MAX_ROWS``.
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"--rows must be from 1 to {MAX_ROWS:,}")
    conn.execute(CREATE_SQL)
    conn.commit()
    for first in range(1, rows + 1, chunk_rows):
        last = min(first + chunk_rows - 1, rows)
        conn.execute(FILL_SQL, {"rows": rows, "first": first, "last": last})
        conn.commit()
        if on_chunk is not None:
            on_chunk(last)
    conn.execute("ANALYZE request_log")
    conn.commit()


#: Exit codes: the database could not be reached or refused the table; a Ctrl-C.
EXIT_SERVER = 3
EXIT_INTERRUPTED = 130


def _exit(message: str, code: int) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> None:
    """Builds the table; anything refused or failed is one line on stderr (exit 2 for bad
    arguments, 3 for the server, 130 when interrupted), never a traceback or the DSN."""
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--dsn", default=os.environ.get("TOOL_BOUNDARY_EXAMPLE_PG_DSN"))
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("give --dsn or set TOOL_BOUNDARY_EXAMPLE_PG_DSN")
    if not 1 <= args.rows <= MAX_ROWS:
        parser.error(f"--rows must be from 1 to {MAX_ROWS:,}")
    started = time.monotonic()

    def report(done: int) -> None:
        print(f"request_log: {done:,} of {args.rows:,} rows ({time.monotonic() - started:.0f}s)")

    try:
        with psycopg.connect(args.dsn, connect_timeout=10) as conn:
            create_demo_table(conn, args.rows, on_chunk=report if args.rows > CHUNK_ROWS else None)
    except psycopg.OperationalError:
        _exit("error: cannot connect to the database (check the DSN)", EXIT_SERVER)
    except psycopg.Error as exc:
        _exit(
            f"error: the database refused the table (SQLSTATE {exc.sqlstate or 'unknown'})",
            EXIT_SERVER,
        )
    except KeyboardInterrupt:
        _exit("interrupted: request_log holds the chunks committed so far", EXIT_INTERRUPTED)
    print(f"request_log: {args.rows:,} rows in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
