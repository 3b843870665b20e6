"""The reports the ``sql_report`` tool may run, and what the model sends to pick one.

A report is a statement the tool author declares, with its parameters' JSON Schema: the model
names a report and gives its parameters (validated at preflight against ``arguments_schema``
and again by the tool), never SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

#: Rows a report returns unless the call asks for fewer or more, and the most it may ask for.
DEFAULT_MAX_ROWS = 500
MAX_ROWS_CAP = 5_000


@dataclass(frozen=True)
class Report:
    """One query the tool author declares: the model may run it, never change it.

    Attributes:
        name: what the model picks.
        description: what the report shows, for the model.
        sql: the statement, its parameters as ``%(name)s`` placeholders (bind variables).
        params: JSON Schema of each parameter, by name.
        required: the parameters the call must give; the others default to ``null``.
    """

    name: str
    description: str
    sql: str
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    required: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if "name" in self.params:
            raise ValueError("a report parameter may not be called 'name' (it names the report)")

    def bind(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every declared parameter's value (``None`` when not given)."""
        return {name: given.get(name) for name in self.params}


_SERVICE = {"type": "string", "minLength": 1, "maxLength": 64, "description": "One service."}

#: The reports of the demo table (``examples.pgreport_demo``).
REPORTS: dict[str, Report] = {
    report.name: report
    for report in (
        Report(
            name="slow_requests",
            description="Requests at least min_latency_ms slow, oldest first.",
            sql=(
                "SELECT id, at, service, route, status, latency_ms FROM request_log"
                " WHERE latency_ms >= %(min_latency_ms)s"
                " AND (%(service)s::text IS NULL OR service = %(service)s::text) ORDER BY id"
            ),
            params={
                "min_latency_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 3_600_000,
                    "description": "Slowest first shown: at least this many milliseconds.",
                },
                "service": _SERVICE,
            },
            required=("min_latency_ms",),
        ),
        Report(
            name="errors_by_route",
            description="Server errors (status >= 500) per service and route, most first.",
            sql=(
                "SELECT service, route, count(*) AS errors FROM request_log"
                " WHERE status >= 500"
                " AND (%(service)s::text IS NULL OR service = %(service)s::text)"
                " GROUP BY service, route ORDER BY errors DESC, service, route"
            ),
            params={"service": _SERVICE},
        ),
        Report(
            name="latency_by_service",
            description="Requests, median and 99th percentile latency (ms) per service.",
            sql=(
                "SELECT service, count(*) AS requests,"
                " percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50_ms,"
                " percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_ms) AS p99_ms"
                " FROM request_log GROUP BY service ORDER BY service"
            ),
        ),
    )
}


def report_schema(report: Report) -> dict[str, Any]:
    """One report as the model asks for it: its name and its parameters."""
    return {
        "type": "object",
        "description": report.description,
        "properties": {"name": {"type": "string", "enum": [report.name]}, **report.params},
        "required": ["name", *report.required],
        "additionalProperties": False,
    }


def arguments_schema(reports: Mapping[str, Report]) -> dict[str, Any]:
    """The tool's ``input_schema``: one of the reports with its parameters, and the row cap.

    The choice of report is an ``anyOf`` inside a property, never at the top level, which
    some model APIs refuse.
    """
    return {
        "type": "object",
        "properties": {
            "report": {
                "anyOf": [report_schema(report) for report in reports.values()],
                "description": "The report to run: its name and its parameters.",
            },
            "max_rows": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_ROWS_CAP,
                "default": DEFAULT_MAX_ROWS,
                "description": "Most rows to return.",
            },
        },
        "required": ["report"],
        "additionalProperties": False,
    }


def check_arguments(
    reports: Mapping[str, Report], arguments: Any
) -> tuple[Report, dict[str, Any], int]:
    """The report, its bound parameters and the row cap; ``ValueError`` naming the schema
    path (never a value) when the arguments do not fit (the tool is callable on its own)."""
    error = next(Draft202012Validator(arguments_schema(reports)).iter_errors(arguments), None)
    if error is not None:
        raise ValueError(f"arguments do not match the schema at {error.json_path}")
    asked = dict(arguments["report"])
    report = reports[asked.pop("name")]
    return report, report.bind(asked), arguments.get("max_rows", DEFAULT_MAX_ROWS)
