"""The report tool's declaration, without a database: what the model may send (a declared
report, its parameters, a bounded row cap; never SQL), and the declared reports' own
consistency (every placeholder a declared parameter)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from boundary import ErrorCode
from examples import pgreport
from examples._pgcells import json_cell
from tests.support.pg import ALL_REPORTS

SPEC = pgreport.build_registry(ALL_REPORTS).get("sql_report")
assert SPEC is not None


@pytest.mark.parametrize(
    "arguments",
    [
        {"report": {"name": "latency_by_service"}},
        {"report": {"name": "slow_requests", "min_latency_ms": 500}},
        {"report": {"name": "slow_requests", "min_latency_ms": 0, "service": "api"}},
        {"report": {"name": "errors_by_route"}, "max_rows": pgreport.MAX_ROWS_CAP},
        {"report": {"name": "errors_by_route", "service": "api"}, "max_rows": 1},
    ],
)
def test_declared_reports_with_their_parameters_are_accepted(arguments: dict) -> None:
    assert SPEC.schema_violation(arguments) is None
    report, params, max_rows = pgreport.check_arguments(ALL_REPORTS, arguments)
    assert report.name == arguments["report"]["name"]
    assert set(params) == set(report.params)
    assert max_rows == arguments.get("max_rows", pgreport.DEFAULT_MAX_ROWS)


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"report": "latency_by_service"},
        {"report": {}},
        {"report": {"name": "no_such_report"}},
        {"report": {"name": "latency_by_service"}, "sql": "DELETE FROM request_log"},
        {"report": {"name": "latency_by_service", "sql": "SELECT 1"}},
        {"report": {"name": "latency_by_service", "min_latency_ms": 0}},
        {"report": {"name": "slow_requests"}},
        {"report": {"name": "slow_requests", "min_latency_ms": "0 OR 1=1"}},
        {"report": {"name": "slow_requests", "min_latency_ms": -1}},
        {"report": {"name": "latency_by_service"}, "max_rows": 0},
        {"report": {"name": "latency_by_service"}, "max_rows": pgreport.MAX_ROWS_CAP + 1},
        {"report": {"name": "latency_by_service"}, "max_rows": True},
    ],
)
def test_anything_but_a_declared_report_and_its_parameters_is_refused(arguments: dict) -> None:
    # Preflight refuses it (INVALID_ARGUMENTS), and the tool itself would too
    assert SPEC.schema_violation(arguments) is not None
    with pytest.raises(ValueError, match="schema"):
        pgreport.check_arguments(ALL_REPORTS, arguments)


def test_no_model_api_meets_a_combinator_at_the_schema_s_top_level() -> None:
    # OpenAI and Anthropic refuse a tool whose top-level schema has anyOf/allOf/oneOf
    schema = pgreport.arguments_schema(ALL_REPORTS)
    assert schema["type"] == "object"
    assert not {"anyOf", "allOf", "oneOf", "not", "if", "enum"} & set(schema)


def test_a_report_parameter_may_not_be_called_name() -> None:
    with pytest.raises(ValueError, match="name"):
        pgreport.Report(name="r", description="", sql="SELECT %(name)s", params={"name": {}})


@pytest.mark.parametrize("report", list(ALL_REPORTS.values()), ids=list(ALL_REPORTS))
def test_every_placeholder_of_a_report_is_a_declared_parameter(report: pgreport.Report) -> None:
    placeholders = set(re.findall(r"%\((\w+)\)s", report.sql))
    assert placeholders == set(report.params)
    assert set(report.required) <= set(report.params)


def test_the_tool_is_declared_read_only_on_the_long_queue_with_a_heartbeat_timeout() -> None:
    spec = pgreport.registry.get("sql_report")
    assert spec is not None and spec.read_only
    assert spec.queue == "long"
    assert spec.heartbeat_timeout_s == pgreport.HEARTBEAT_TIMEOUT_S
    # the watchdog beats far more often than the timeout, so a running report is never lost
    assert spec.heartbeat_timeout_s > pgreport.BEAT_S * 10
    assert spec.max_concurrency == pgreport.MAX_CONCURRENCY
    assert spec.retry.retry_on == {ErrorCode.WORKER_LOST}


def test_postgres_values_become_json_cells() -> None:
    at = datetime(2026, 12, 4, 5, 0, tzinfo=UTC)
    assert json_cell(at) == "2026-12-04T05:00:00+00:00"
    assert json_cell(Decimal("1.10")) == "1.10"
    assert json_cell(timedelta(seconds=90)) == 90.0
    assert json_cell(b"\x01\xff") == "01ff"
    assert json_cell(float("nan")) == "nan"
    assert json_cell([1, Decimal("2")]) == [1, "2"]
    assert json_cell({"a": at}) == {"a": "2026-12-04T05:00:00+00:00"}
