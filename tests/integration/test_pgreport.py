"""The PostgreSQL report tool (``examples.pgreport``) against a real server, through the
boundary with the in-process dispatcher: read-only transactions, bound parameters, the row
cap, progress between batches, and time-outs and cancels that leave no statement running."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import redis

import boundary as boundary_api
from boundary import (
    ErrorCode,
    EvidenceStatus,
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
    ToolTimeout,
)
from examples import pgreport
from tests.celery.conftest import all_redis_text
from tests.support.helpers import wait_until
from tests.support.pg import (
    ALL_REPORTS,
    DEMO_ROWS,
    running_statements,
    scratch_database,
    table_rows,
)

RUN = RunContext(run_id="run-pg", authorized_tools=frozenset({"sql_report"}))


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    with scratch_database() as dsn:
        yield dsn


@pytest.fixture
def dsn(database: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(pgreport.DSN_ENV, database)
    return database


def report_boundary(
    store: RedisCanonicalStore, *, inline: bool = True, **options: object
) -> ToolBoundary:
    registry = pgreport.build_registry(ALL_REPORTS, **options)  # type: ignore[arg-type]
    dispatcher = InProcessDispatcher(store, registry, inline=inline)
    return ToolBoundary(store=store, registry=registry, dispatcher=dispatcher)


def call(
    call_id: str, report: str, params: dict | None = None, **arguments: object
) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=RUN.run_id,
        tool_call_id=call_id,
        tool_name="sql_report",
        arguments={"report": {"name": report, **(params or {})}, **arguments},
    )


def test_a_report_returns_at_most_max_rows_and_says_there_were_more(
    store: RedisCanonicalStore, dsn: str
) -> None:
    boundary = report_boundary(store, batch_rows=64)
    # When a report that matches every row is capped at 150 rows (three batches)
    outcome = boundary.invoke(
        call("r1", "slow_requests", params={"min_latency_ms": 0}, max_rows=150), RUN, timeout=30
    )
    # Then the call is READY with more_rows, and the raw response holds exactly the cap
    assert outcome.status is InvocationStatus.READY, outcome
    assert outcome.result is not None and outcome.result["more_rows"] is True
    record = store.get(outcome_key("r1"))
    assert record is not None and record.raw is not None
    raw = json.loads(record.raw)
    assert len(raw["rows"]) == 150
    assert [row[0] for row in raw["rows"]] == list(range(1, 151))
    assert raw["columns"] == ["id", "at", "service", "route", "status", "latency_ms"]
    # And a report with fewer rows than the cap says there were no more
    outcome = boundary.invoke(call("r2", "latency_by_service"), RUN, timeout=30)
    assert outcome.result is not None and outcome.result["row_count"] == 5
    assert "more_rows" not in outcome.result


def outcome_key(call_id: str) -> boundary_api.CanonicalKey:
    return boundary_api.CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)


def test_parameters_are_bound_never_spliced_into_the_statement(
    store: RedisCanonicalStore, dsn: str
) -> None:
    boundary = report_boundary(store)
    hostile = "api'; DROP TABLE request_log; --"
    # When a parameter holds SQL
    outcome = boundary.invoke(
        call("b1", "slow_requests", params={"min_latency_ms": 0, "service": hostile}),
        RUN,
        timeout=30,
    )
    # Then it is compared as a value: nothing matches, and the table is whole
    assert outcome.status is InvocationStatus.READY, outcome
    assert outcome.evidence_status is EvidenceStatus.NO_EVIDENCE
    assert table_rows(dsn, "request_log") == DEMO_ROWS


def test_a_report_that_writes_is_refused_by_the_read_only_transaction(
    store: RedisCanonicalStore, dsn: str
) -> None:
    # When a declared report calls a function that inserts a row
    with pytest.raises(pgreport.ReportFailed) as refused:
        pgreport.run_report({"report": {"name": "write_one"}}, ALL_REPORTS)
    outcome = report_boundary(store).invoke(call("w1", "write_one"), RUN, timeout=30)
    # Then the server refuses it as a write in a read-only transaction, and nothing is written
    assert refused.value.reason == "25006"  # read_only_sql_transaction
    assert outcome.error_code is ErrorCode.TOOL_EXECUTION_FAILED
    assert table_rows(dsn, "written") == 0


def test_the_transaction_is_read_only_and_time_bounded_and_keeps_the_dsn_options(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a DSN with options of its own
    monkeypatch.setenv(pgreport.DSN_ENV, f"{dsn} options='-c work_mem=1234kB'")
    # When a report shows the settings it runs under
    raw = pgreport.run_report(
        {"report": {"name": "session_settings"}}, ALL_REPORTS, time_limit_s=30
    )
    [[read_only, statement_timeout, work_mem]] = raw["rows"]
    # Then its transaction is read-only, its statements end before the time limit, and the
    # DSN's own options hold
    assert read_only == "on"
    assert statement_timeout not in ("0", "30s"), statement_timeout
    assert work_mem == "1234kB"


def test_the_dsn_never_reaches_an_outcome_a_record_or_a_log(
    store: RedisCanonicalStore,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "s3cret-Passw0rd"
    # Given a DSN with a password, for a server that does not answer
    monkeypatch.setenv(pgreport.DSN_ENV, f"postgresql://reader:{secret}@127.0.0.1:9/orbit")
    caplog.set_level(logging.DEBUG)
    # When a report is asked for
    outcome = report_boundary(store).invoke(call("d1", "latency_by_service"), RUN, timeout=30)
    # Then the call failed with a code, and the password is nowhere
    assert outcome.error_code is ErrorCode.TOOL_EXECUTION_FAILED
    assert secret not in outcome.model_dump_json()
    assert secret not in all_redis_text(redis_client)
    assert secret not in caplog.text
    assert "127.0.0.1:9" not in all_redis_text(redis_client) + caplog.text


def test_statement_timeout_from_the_time_left_ends_a_slow_statement_on_the_server(
    dsn: str,
) -> None:
    # When a report runs longer than its time limit (outside a tool: the limit given)
    with pytest.raises(ToolTimeout):
        pgreport.run_report(
            {"report": {"name": "sleep", "seconds": 120}}, ALL_REPORTS, time_limit_s=1.0
        )
    # Then the server ended it: no statement of the tool runs on the database
    wait_until(lambda: not running_statements(dsn), "the statement to end")


def test_a_call_past_its_time_limit_ends_tool_timeout_with_no_statement_left(
    store: RedisCanonicalStore, dsn: str
) -> None:
    boundary = report_boundary(store, timeout_s=1.5)
    # When a call's report sleeps far past the tool's time limit
    outcome = boundary.invoke(call("t1", "sleep", params={"seconds": 120}), RUN, timeout=30)
    # Then the call is sealed TOOL_TIMEOUT and the statement no longer runs on the server
    assert outcome.error_code is ErrorCode.TOOL_TIMEOUT, outcome
    wait_until(lambda: not running_statements(dsn), "the statement to end")


def test_progress_between_batches_is_visible_while_the_report_runs(
    store: RedisCanonicalStore, dsn: str
) -> None:
    boundary = report_boundary(store, inline=False, batch_rows=50)
    # Given a report whose rows come slowly, 50 to a batch
    submission = boundary.submit(
        call("p1", "slow_rows", params={"row_s": 0.005}, max_rows=1000), RUN
    )
    assert submission.accepted

    def progressed() -> ToolOutcome | None:
        outcome = boundary.outcome(RUN.run_id, "p1", timeout=0.05)
        progress = outcome.progress
        return outcome if progress is not None and progress.fraction else None

    # When its caller looks while it runs
    pending = wait_until(progressed, "the report's progress")
    # Then it sees a fraction of the row cap and how many rows were read
    assert pending.pending
    assert 0 < pending.progress.fraction < 1
    assert pending.progress.message.endswith("rows read")
    # And the record holds it, with the store's time of the heartbeat
    record = store.get(outcome_key("p1"))
    assert record is not None and record.status is InvocationStatus.PROJECTING
    assert record.progress is not None and record.progress > 0
    assert record.progress_message is not None and record.heartbeat_at is not None
    done = boundary.outcome(RUN.run_id, "p1", timeout=60)
    assert done.status is InvocationStatus.READY, done
    assert done.result is not None and done.result["more_rows"] is True


def test_cancel_stops_the_running_statement_on_the_server(
    store: RedisCanonicalStore, dsn: str
) -> None:
    boundary = report_boundary(store, inline=False)
    # Given a report whose statement is running on the server
    assert boundary.submit(call("c1", "sleep", params={"seconds": 120}), RUN).accepted
    wait_until(lambda: running_statements(dsn), "the statement to start")
    # When the call is cancelled
    cancelled = boundary.cancel(RUN.run_id, "c1")
    # Then the call is CANCELLED and its statement stops on the server (within a heartbeat
    # interval; the bound here only catches a statement left running)
    assert cancelled.error_code is ErrorCode.CANCELLED
    wait_until(lambda: not running_statements(dsn), "the statement to be cancelled")
    record = store.get(outcome_key("c1"))
    assert record is not None and record.error_code is ErrorCode.CANCELLED
    assert record.raw is None
