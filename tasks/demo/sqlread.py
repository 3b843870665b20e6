"""Read-only SQL over a SQLite file, with three independent guards against writes.

1. The file is opened with ``mode=ro``: SQLite itself refuses to write it.
2. ``PRAGMA query_only = ON``: the connection refuses any statement that would write.
3. An authorizer allows only reading actions, so writes, ``ATTACH``, ``PRAGMA`` and
   temporary objects fail when the statement is prepared, before anything runs.

Each guard alone would do; together a mistake in one does not open the file for writing.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from boundary.errors import ToolTimeout

#: Rows a query returns at most; the raw response then says ``more_rows``.
MAX_ROWS = 10_000
#: Default wall-clock budget of one statement. Enforced inside SQLite, so an abandoned
#: query (the boundary stopped waiting) does not keep running in its worker thread.
DEFAULT_TIME_LIMIT_S = 10.0
#: SQLite virtual machine steps between two deadline checks.
PROGRESS_STEPS = 1000

_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write ``path`` (guards 1 and 2)."""
    if not path.is_file():
        # mode=ro never creates a file, but say so plainly rather than through SQLite.
        raise FileNotFoundError(path.name)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _authorize(action: int, *_: object) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def json_cell(value: Any) -> Any:
    """A SQLite value as JSON: a blob as an ``X'..'`` literal, an infinity as text."""
    if isinstance(value, bytes):
        return f"X'{value.hex().upper()}'"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def run_query(
    path: Path,
    sql: str,
    params: Sequence[Any] = (),
    *,
    max_rows: int | None = MAX_ROWS,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> dict[str, Any]:
    """Runs one read-only statement and returns its columns and (at most ``max_rows``) rows.

    Raises:
        sqlite3.Error: a syntax error, more than one statement, or any write attempt.
        ToolTimeout: the statement ran past ``time_limit_s``.
    """
    deadline = time.monotonic() + time_limit_s
    conn = connect_read_only(path)
    try:
        conn.set_authorizer(_authorize)
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_STEPS)
        try:
            cursor = conn.execute(sql, tuple(params))
            columns = [d[0] for d in cursor.description or ()]
            fetched = cursor.fetchall() if max_rows is None else cursor.fetchmany(max_rows + 1)
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise ToolTimeout() from None
            raise
    finally:
        conn.close()
    more_rows = max_rows is not None and len(fetched) > max_rows
    rows = [[json_cell(v) for v in row] for row in fetched[:max_rows]]
    return {"columns": columns, "rows": rows, "more_rows": more_rows}


def readable_tables(path: Path) -> list[str]:
    """The tables and views a dump may name (SQLite's own tables excluded)."""
    result = run_query(
        path,
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    return [row[0] for row in result["rows"]]
