"""Read-only SQL reports on PostgreSQL: the reference long-running tool.

``TOOL_BOUNDARY_TOOLS=examples.pgreport:registry`` serves one tool, ``sql_report``. The model
picks one of the reports the tool author declared (``REPORTS``) and its parameters; it never
sends SQL. The parameters reach the server only as bind variables. Each call:

- connects with the DSN in ``TOOL_BOUNDARY_EXAMPLE_PG_DSN`` (never in a result or a log; a
  failure is reported by its SQLSTATE only);
- runs in a read-only transaction of a read-only session (two guards: either alone refuses
  every write);
- sets ``statement_timeout`` from the call's time left before every statement, so the server
  itself ends a query the boundary has stopped waiting for;
- reads the rows through a server-side cursor in batches, with a ``heartbeat()`` between
  batches and, while a statement runs, every ``BEAT_S`` from a watchdog thread (a long sort
  sends no rows for minutes, yet its call is alive);
- stops at the row cap (``max_rows``, bounded) and says ``more_rows``;
- on cancellation (``CallCancelled`` from a heartbeat) or time-out, cancels the running
  statement on the server and closes the connection: no query of a finished call keeps running.

The reports live in ``examples.pgreport_reports``; the database is read in place, and
``python -m examples.pgreport_demo`` creates the demo table.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from contextvars import copy_context
from typing import Any

from boundary import CallCancelled, RetryPolicy, current_call, heartbeat
from boundary.errors import ErrorCode, ToolTimeout
from boundary.registry import ToolRegistry, ToolSpec
from examples._pgcells import json_cell
from examples.pgreport_reports import (
    DEFAULT_MAX_ROWS,
    MAX_ROWS_CAP,
    REPORTS,
    Report,
    arguments_schema,
    check_arguments,
)
from projectors.sql import SqlRowsProjector

__all__ = [
    "DEFAULT_MAX_ROWS",
    "MAX_ROWS_CAP",
    "REPORTS",
    "Report",
    "ReportFailed",
    "arguments_schema",
    "build_registry",
    "check_arguments",
    "registry",
    "run_report",
]

logger = logging.getLogger(__name__)

#: The environment variable holding the libpq connection string (or URL) of the database.
DSN_ENV = "TOOL_BOUNDARY_EXAMPLE_PG_DSN"
#: Rows fetched per round trip of the server-side cursor; a heartbeat follows each batch.
BATCH_ROWS = 500
#: Seconds between two watchdog heartbeats while a statement runs (the boundary coalesces
#: them to one store write per heartbeat interval; a cancel is seen at the next write).
BEAT_S = 0.25
#: The tool's time limit, and the time a report run outside a tool may take.
TIMEOUT_S = 300.0
#: A call silent this long is lost (its worker died): the watchdog beats far more often.
HEARTBEAT_TIMEOUT_S = 15.0
#: The statement ends this much before the call's time is up, so the tool reports the
#: time-out itself rather than leaving a statement behind a boundary that stopped waiting.
STATEMENT_MARGIN_S = 0.2
#: Longest connection attempt, seconds (libpq counts whole seconds, at least 2).
CONNECT_TIMEOUT_S = 10
#: Names the tool's sessions in ``pg_stat_activity``.
APPLICATION_NAME = "tool-boundary sql_report"
#: The queue of long tools (``ToolSpec.queue``).
LONG_QUEUE = "long"
#: Reports at once per worker process: each holds a database session.
MAX_CONCURRENCY = 4
#: A report whose worker was lost runs once more (it only reads); one that timed out would
#: most likely time out again, so it is not retried.
RETRY = RetryPolicy(max_attempts=2, retry_on=frozenset({ErrorCode.WORKER_LOST}))
#: Corpus named in scopes.
CORPUS = "postgresql"


class ReportFailed(Exception):
    """A report could not run. ``reason`` is a SQLSTATE or one of our fixed words, never
    driver text (which may quote the DSN, parameters or rows)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Watchdog:
    """Heartbeats while the tool's thread waits on the server; cancels the running statement
    once a heartbeat says the call is over.

    Runs in a copy of the tool's context, so its heartbeats are the call's own.
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._stop = threading.Event()
        self.progress: float | None = None
        self.message: str | None = None
        #: The ``CallCancelled`` a heartbeat raised here, once the statement was cancelled.
        self.cancelled: CallCancelled | None = None
        self._thread = threading.Thread(
            target=copy_context().run, args=(self._watch,), name="pgreport-watchdog", daemon=True
        )

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _watch(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(BEAT_S):
            if self.cancelled is None:
                # Before the first rows (a long sort or aggregate sends none for minutes),
                # the message says how long the statement has run, so watchers see it move.
                waited = f"statement running, {time.monotonic() - started:.0f}s, no rows yet"
                try:
                    heartbeat(progress=self.progress, message=self.message or waited)
                    continue
                except CallCancelled as exc:
                    self.cancelled = exc
            # Again at every beat until the tool's thread leaves: a cancel request that
            # arrives between two statements cancels nothing.
            cancel_statement(self._conn)

    def report(self, progress: float, message: str) -> None:
        """The tool's latest progress: sent now, and by the watchdog while it waits."""
        self.progress, self.message = progress, message
        heartbeat(progress=progress, message=message)


def cancel_statement(conn: Any) -> None:
    """Asks the server to cancel whatever ``conn`` is running (nothing, if idle).

    The driver's cancel request first; if it cannot be sent, ``pg_cancel_backend`` over a
    second connection. Never raises: this runs on the way out of a failing call.
    """
    import psycopg

    if conn.closed:
        return  # the session is gone, and its statement with it
    try:
        conn.cancel_safe(timeout=CONNECT_TIMEOUT_S)
        return
    except Exception:
        if conn.closed:
            return
        logger.warning("cancel request not sent; trying pg_cancel_backend")
    try:
        pid = conn.info.backend_pid
        with psycopg.connect(_dsn(), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as other:
            other.execute("SELECT pg_cancel_backend(%s)", (pid,))
    except Exception:
        logger.warning("could not cancel a report statement on the server")


def _connect(deadline: float) -> Any:
    """A session of the report database that refuses writes, named in pg_stat_activity."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        dsn = _dsn()
        # The session refuses writes too, whatever a transaction says; the DSN's own
        # options (a search_path, say) are kept.
        options = conninfo_to_dict(dsn).get("options") or ""
        return psycopg.connect(
            make_conninfo(dsn, options=f"{options} -c default_transaction_read_only=on".strip()),
            connect_timeout=max(2, min(CONNECT_TIMEOUT_S, int(_time_left(deadline)))),
            application_name=APPLICATION_NAME,
        )
    except psycopg.Error:
        raise ReportFailed("CONNECT_FAILED") from None


def _dsn() -> str:
    dsn = os.environ.get(DSN_ENV, "").strip()
    if not dsn:
        raise ReportFailed("NOT_CONFIGURED")
    return dsn


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic() - STATEMENT_MARGIN_S
    if left <= 0:
        raise ToolTimeout()
    return left


def _ms_left(deadline: float) -> str:
    return str(max(int(_time_left(deadline) * 1000), 1))


def _limit_session(conn: Any, deadline: float) -> None:
    """Bounds the transaction's statements by the call's time left, and what the server
    does if the tool stops talking to it: an idle transaction (a hung worker) ends with the
    call's time, a dead worker's statement within a second (PostgreSQL 14+ checks the
    client's socket while a statement runs)."""
    settings = ["statement_timeout", "idle_in_transaction_session_timeout"]
    if conn.info.server_version >= 140000:
        settings.append("client_connection_check_interval")
    values = [_ms_left(deadline)] * 2 + ["1000"] * (len(settings) - 2)
    # SET takes no bind variables; set_config does. Local: ends with the transaction.
    calls = ", ".join("set_config(%s, %s, true)" for _ in settings)
    conn.execute(
        f"SELECT {calls}", [v for pair in zip(settings, values, strict=True) for v in pair]
    )


def _limit_statement(conn: Any, deadline: float) -> None:
    conn.execute("SELECT set_config('statement_timeout', %s, true)", (_ms_left(deadline),))


def _read(
    conn: Any,
    *,
    report: Report,
    params: dict[str, Any],
    max_rows: int,
    batch_rows: int,
    deadline: float,
    watchdog: _Watchdog,
) -> dict[str, Any]:
    conn.read_only = True  # BEGIN READ ONLY
    rows: list[list[Any]] = []
    _limit_session(conn, deadline)
    with conn.cursor(name="report") as cursor:
        cursor.execute(report.sql, params)  # DECLARE: binds only
        columns = [column.name for column in cursor.description or ()]
        # One row past the cap says whether there were more.
        while len(rows) <= max_rows:
            if watchdog.cancelled is not None:
                raise watchdog.cancelled
            _limit_statement(conn, deadline)
            batch = cursor.fetchmany(min(batch_rows, max_rows + 1 - len(rows)))
            rows.extend([json_cell(value) for value in row] for row in batch)
            read = min(len(rows), max_rows)
            watchdog.report(read / max_rows, f"{read} rows read")
            if len(batch) < batch_rows:
                break
    return {
        "report": report.name,
        "columns": columns,
        "rows": rows[:max_rows],
        "more_rows": len(rows) > max_rows,
    }


def run_report(
    arguments: Any,
    reports: Mapping[str, Report] = REPORTS,
    *,
    batch_rows: int = BATCH_ROWS,
    time_limit_s: float = TIMEOUT_S,
) -> dict[str, Any]:
    """Runs one declared report and returns its columns and (at most ``max_rows``) rows.

    Inside a tool, the call's time left bounds it; ``time_limit_s`` does elsewhere.

    Raises:
        ValueError: the arguments do not fit the schema.
        ReportFailed: no DSN, no connection, or the server refused (a write, bad SQL).
        ToolTimeout: the time ran out; the statement was ended on the server.
        CallCancelled: the call was cancelled; the statement was cancelled on the server.
    """
    import psycopg

    report, params, max_rows = check_arguments(reports, arguments)
    call = current_call()
    deadline = time.monotonic() + (call.time_left_s if call is not None else time_limit_s)
    _time_left(deadline)
    conn = _connect(deadline)
    try:
        with _Watchdog(conn) as watchdog:
            try:
                return _read(
                    conn,
                    report=report,
                    params=params,
                    max_rows=max_rows,
                    batch_rows=batch_rows,
                    deadline=deadline,
                    watchdog=watchdog,
                )
            except CallCancelled:
                # Only to stop the server's work: the boundary decides what the call became.
                cancel_statement(conn)
                raise
            except psycopg.errors.QueryCanceled:
                if watchdog.cancelled is not None:
                    raise watchdog.cancelled from None
                if deadline - time.monotonic() <= STATEMENT_MARGIN_S * 2:
                    raise ToolTimeout() from None
                raise ReportFailed("57014") from None  # cancelled by someone else
            except psycopg.Error as exc:
                logger.warning("report %s failed: SQLSTATE %s", report.name, exc.sqlstate)
                raise ReportFailed(exc.sqlstate or "UNKNOWN") from None
    finally:
        conn.close()  # ends the transaction and the session


def build_registry(
    reports: Mapping[str, Report] = REPORTS,
    *,
    name: str = "sql_report",
    timeout_s: float = TIMEOUT_S,
    batch_rows: int = BATCH_ROWS,
    **options: Any,
) -> ToolRegistry:
    """A registry with one report tool over ``reports``, on the ``long`` queue.

    ``options`` replace or add ``ToolSpec`` fields (``retry``, ``max_concurrency``, ...).
    """
    reports = dict(reports)

    def sql_report(arguments: dict[str, Any]) -> dict[str, Any]:
        return run_report(arguments, reports, batch_rows=batch_rows, time_limit_s=timeout_s)

    long_tool: dict[str, Any] = {
        "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S,
        "queue": LONG_QUEUE,
        "max_concurrency": MAX_CONCURRENCY,
        "retry": RETRY,
    }
    spec = ToolSpec(
        name=name,
        executor=sql_report,
        description=(
            "Run one of the declared read-only reports on the PostgreSQL database and return"
            " its rows (at most max_rows)."
        ),
        input_schema=arguments_schema(reports),
        projector=SqlRowsProjector(corpus=CORPUS, scope_keys=("report",)),
        read_only=True,
        timeout_s=timeout_s,
        **(long_tool | options),
    )
    return ToolRegistry([spec])


#: The registry workers load (``TOOL_BOUNDARY_TOOLS=examples.pgreport:registry``).
registry = build_registry()
