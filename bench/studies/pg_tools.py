"""The report tool as the PostgreSQL tests and ``bench.studies.pgreport`` declare it: the
demo's reports and a few of their own, as a tool author would add. A worker subprocess loads
``bench.studies.pg_tools:registry`` (this module imports no test framework)."""

from __future__ import annotations

from examples import pgreport

#: Reports the tests declare on top of the demo's.
TEST_REPORTS = {
    report.name: report
    for report in (
        pgreport.Report(
            name="sleep",
            description="Sleeps on the server.",
            sql="SELECT pg_sleep(%(seconds)s::float8) AS slept",
            params={"seconds": {"type": "number", "minimum": 0, "maximum": 600}},
            required=("seconds",),
        ),
        pgreport.Report(
            name="slow_rows",
            description="The requests in id order, each row taking a little while.",
            sql=(
                "SELECT id, service, pg_sleep(%(row_s)s::float8)::text AS slept"
                " FROM request_log ORDER BY id"
            ),
            params={"row_s": {"type": "number", "minimum": 0, "maximum": 1}},
            required=("row_s",),
        ),
        pgreport.Report(
            name="session_settings",
            description="The settings the tool's transaction runs under.",
            sql=(
                "SELECT current_setting('transaction_read_only') AS read_only,"
                " current_setting('statement_timeout') AS statement_timeout,"
                " current_setting('work_mem') AS work_mem"
            ),
        ),
        pgreport.Report(
            name="write_one",
            description="Calls a function that writes.",
            sql="SELECT write_one() AS n",
        ),
    )
}
ALL_REPORTS = {**pgreport.REPORTS, **TEST_REPORTS}
#: The tool's time limit in the worker tests: above every sleep they cancel, below the
#: visibility timeout they give the broker.
WORKER_TIMEOUT_S = 120.0

#: A short heartbeat timeout, so the reaper finds a killed worker's call within seconds (the
#: watchdog beats every quarter second, stored once per second).
HEARTBEAT_TIMEOUT_S = 3.0

registry = pgreport.build_registry(
    ALL_REPORTS, timeout_s=WORKER_TIMEOUT_S, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S
)
