"""A long-running example tool: ``scan_metrics`` reads the request metrics a page at a time,
as a report over a slow backend would, and reports its progress with ``heartbeat()``.

Each page is a real query of the bundled database followed by a pause (``page_s``) that
stands for a slow backend, so the demo's call lasts a few seconds. With
``simulate_lost_worker`` its first attempt goes silent part way, as a process that died
would: no heartbeat comes, the reaper finds the call lost after its heartbeat timeout and
hands it to attempt 2, and the silent attempt learns at its next heartbeat that it must stop.
"""

from __future__ import annotations

import time
from typing import Any

from boundary import current_call, heartbeat
from boundary.registry import RetryPolicy, ToolSpec
from projectors.sql import SqlRowsProjector
from tasks.demo import sqlread
from tasks.demo.arguments import check_keys, int_arg
from tasks.demo.bundled import DB_PATH

#: Hours of metrics (one page each) at most, and the longest pause per page.
MAX_PAGES = 240
MAX_PAGE_S = 2.0
#: The scan's silence budget: a silent attempt is lost after this many seconds.
HEARTBEAT_TIMEOUT_S = 1.5

SCAN_METRICS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pages": {"type": "integer", "minimum": 1, "maximum": MAX_PAGES},
        "page_s": {"type": "number", "minimum": 0, "maximum": MAX_PAGE_S},
        "simulate_lost_worker": {"type": "boolean"},
    },
    "required": ["pages"],
    "additionalProperties": False,
}

_PAGE_SQL = (
    "SELECT service, sum(requests) AS requests, sum(errors) AS errors, max(p95_ms) AS p95_ms "
    "FROM request_metrics WHERE minute >= strftime('%Y-%m-%dT%H:%M:00Z', '2025-03-05', ?) "
    "AND minute < strftime('%Y-%m-%dT%H:%M:00Z', '2025-03-05', ?) GROUP BY service"
)


def scan_metrics(arguments: dict[str, Any]) -> dict[str, Any]:
    """Per-service request and error totals over ``pages`` hours of metrics, an hour a page."""
    args = check_keys(arguments, {"pages", "page_s", "simulate_lost_worker"})
    pages = int_arg(args, "pages", default=10, low=1, high=MAX_PAGES)
    page_s = float(args.get("page_s", 0.2))
    call = current_call()
    attempt = call.attempt if call else 1
    totals: dict[str, list[int]] = {}
    for page in range(pages):
        heartbeat(progress=page / pages, message=f"hour {page + 1} of {pages}")
        if args.get("simulate_lost_worker") and attempt == 1 and page == pages // 4:
            _go_silent()
        found = sqlread.run_query(DB_PATH, _PAGE_SQL, [f"+{page} hours", f"+{page + 1} hours"])
        for service, requests, errors, p95 in found["rows"]:
            row = totals.setdefault(service, [0, 0, 0])
            row[0] += requests
            row[1] += errors
            row[2] = max(row[2], p95)
        time.sleep(page_s)
    heartbeat(progress=1.0, message=f"{pages} hours scanned")
    rows = [[s, *totals[s]] for s in sorted(totals)]
    return {
        "columns": ["service", "requests", "errors", "max_p95_ms"],
        "rows": rows,
        "row_count": len(rows),
        "truncated": False,
    }


def _go_silent() -> None:
    """Stops heartbeating, as a dead process would, until the call is handed on: the next
    heartbeat after the reaper gave the call to attempt 2 raises ``CallCancelled``."""
    while True:
        time.sleep(HEARTBEAT_TIMEOUT_S * 2)
        heartbeat()


def scan_metrics_spec(db_corpus: str) -> ToolSpec:
    return ToolSpec(
        name="scan_metrics",
        executor=scan_metrics,
        description=(
            "Per-service request and error totals of the Orbit API, scanned an hour of metrics"
            " at a time (slow: it reports its progress)."
        ),
        input_schema=SCAN_METRICS_SCHEMA,
        projector=SqlRowsProjector(corpus=db_corpus, scope_keys=("pages",)),
        read_only=True,
        timeout_s=MAX_PAGES * (MAX_PAGE_S + 1),
        heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
        retry=RetryPolicy(max_attempts=2, backoff_s=0),
        queue="long",
    )


def audit_metrics_spec(db_corpus: str) -> ToolSpec:
    """``scan_metrics`` under fleet flow control: the metrics store takes one full audit at a
    time, whatever the number of workers, so a second call waits for the first's slot."""
    return scan_metrics_spec(db_corpus).model_copy(
        update={
            "name": "audit_metrics",
            "description": (
                "Audit of the Orbit API's request and error totals, an hour of metrics at a"
                " time; one audit runs at once across the fleet (others wait their turn)."
            ),
            "concurrency": 1,
        }
    )
