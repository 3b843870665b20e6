"""``tool-boundary demo``: a scripted agent run through the whole boundary.

Preflight, the canonical store, Celery execution and projection, observed facts: the same
code path as production. With no ``TOOL_BOUNDARY_REDIS_URL`` it embeds a Redis-protocol server
(fakeredis) on a free loopback port and a Celery worker thread, so nothing needs installing.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from boundary import (
    ErrorCode,
    InvocationStatus,
    ObservedFacts,
    RunContext,
    ToolCallEnvelope,
    ToolRegistry,
    load_registry,
)
from tasks.demo.long_calls import (
    LIMITED_TOOL,
    LONG_SCRIPT,
    LONG_TOOL,
    LongReport,
    reaper_thread,
    run_long_calls,
)
from tasks.runtime import get_runtime
from tasks.settings import Settings, redis_location
from tasks.wiring.app import LONG_QUEUE, PROJECTIONS_QUEUE, TOOLS_QUEUE, configure
from tasks.wiring.dispatcher import CeleryDispatcher
from tasks.wiring.services import check_broker, check_result_backend, check_workers

#: Seconds the demo waits for one call before calling it stuck.
CALL_TIMEOUT_S = 30.0
#: The logger of failed tools' diagnostics (``boundary.diagnostics``).
DIAGNOSTICS_LOGGER = "boundary.diagnostics"
#: The logger of a worker's start-up check (``tasks.worker.startup``).
STARTUP_CHECK_LOGGER = "tasks.worker.startup"
#: The reaper's logger: its retry of the demo's lost call is shown in the long calls' table.
REAPER_LOGGER = "boundary.reaper"
#: Threads of the embedded worker (the long calls hold three while the quick ones run).
WORKER_THREADS = 8


@dataclass(frozen=True)
class Step:
    """One scripted call, and the outcome the demo expects of it."""

    label: str
    tool: str
    tool_call_id: str
    arguments: dict[str, Any]
    expect_status: InvocationStatus
    expect_error: ErrorCode | None = None


#: The agent's calls, in order. Together they show every kind of end a call can have.
SCRIPT: tuple[Step, ...] = (
    Step(
        "search with evidence",
        "search_docs",
        "call_search_1",
        {"query": "upstream timeout retries"},
        InvocationStatus.READY,
    ),
    Step(
        "log query",
        "search_logs",
        "call_logs_1",
        {"query": "timeout", "level": "ERROR"},
        InvocationStatus.READY,
    ),
    Step(
        "SQL read",
        "sql_read",
        "call_sql_1",
        {
            "sql": "SELECT s.name AS service, count(*) AS incidents FROM incidents i "
            "JOIN services s ON s.id = i.service_id GROUP BY s.name ORDER BY incidents DESC"
        },
        InvocationStatus.READY,
    ),
    Step(
        "search, no evidence",
        "search_docs",
        "call_search_2",
        {"query": "quantum entanglement billing"},
        InvocationStatus.READY,
    ),
    Step(
        "repeated tool_call_id",
        "search_docs",
        "call_search_1",
        {"query": "upstream timeout retries"},
        InvocationStatus.ERROR,
        ErrorCode.DUPLICATE_TOOL_CALL,
    ),
    Step(
        "unauthorized tool",
        "delete_rows",
        "call_delete_1",
        {"table": "incidents", "where": "1=1"},
        InvocationStatus.ERROR,
        ErrorCode.UNAUTHORIZED,
    ),
    Step(
        "past the tool budget",
        "search_docs",
        "call_search_3",
        {"query": "deploy rollback"},
        InvocationStatus.ERROR,
        ErrorCode.TOOL_BUDGET_EXHAUSTED,
    ),
    Step(
        "raw output too large",
        "dump_table",
        "call_dump_1",
        {"table": "request_metrics"},
        InvocationStatus.ERROR,
        ErrorCode.RESULT_TOO_LARGE,
    ),
)

#: What the scripted run may use: not ``delete_rows``, and ``search_docs`` twice.
AUTHORIZED_TOOLS = frozenset(
    {"search_docs", "search_logs", "sql_read", "dump_table", LONG_TOOL, LIMITED_TOOL}
)
TOOL_BUDGETS = {"search_docs": 2}


@dataclass
class CallReport:
    step: str
    tool: str
    tool_call_id: str
    status: str
    evidence_status: str | None
    error_code: str | None
    latency_ms: float
    result: Any = None
    scope: Any = None
    expected: bool = True


@dataclass
class DemoReport:
    run_id: str
    mode: str
    store: str
    calls: list[CallReport] = field(default_factory=list)
    long_calls: list[LongReport] = field(default_factory=list)
    facts: ObservedFacts | None = None
    wall_s: float = 0.0
    #: The run's page in the web view (``demo --web``).
    web_url: str | None = None

    @property
    def ok(self) -> bool:
        expected = [call.expected for call in self.calls]
        expected += [call.expected for call in self.long_calls]
        return all(expected) and self.facts is not None


@contextmanager
def embedded_redis() -> Iterator[str]:
    """A Redis-protocol server (fakeredis, with Lua) on a free loopback port, for this
    process only; yields its URL."""
    from fakeredis import TcpFakeServer

    server = TcpFakeServer(("127.0.0.1", 0), server_type="redis")
    thread = threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{server.server_address[1]}/0"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def worker_thread(app: Any, *, embedded: bool = False) -> Iterator[None]:
    """A real Celery worker (threads pool) consuming both queues, in this process.

    The demo's scripted failure (a raw response too large) is not logged as a diagnostic
    here: the table already shows it, and the log line would break the table's layout.
    Nor, on the embedded server, the start-up check's warning: fakeredis answers no INFO, and
    "the store's Redis did not answer the start-up check" on every run would be about a server
    the user does not run (the check's refusals, at CRITICAL, still show).
    """
    from celery.contrib.testing.worker import start_worker

    diagnostics = logging.getLogger(DIAGNOSTICS_LOGGER)
    level = diagnostics.level
    diagnostics.setLevel(logging.ERROR)
    reaper = logging.getLogger(REAPER_LOGGER)
    reaper_level = reaper.level
    reaper.setLevel(logging.ERROR)
    checks = logging.getLogger(STARTUP_CHECK_LOGGER)
    checks_level = checks.level
    if embedded:
        checks.setLevel(logging.ERROR)
    try:
        with start_worker(
            app,
            pool="threads",
            concurrency=WORKER_THREADS,
            queues=[TOOLS_QUEUE, LONG_QUEUE, PROJECTIONS_QUEUE],
            perform_ping_check=False,
            loglevel="WARNING",
            shutdown_timeout=30,
        ):
            checks.setLevel(checks_level)
            yield
    finally:
        diagnostics.setLevel(level)
        reaper.setLevel(reaper_level)
        checks.setLevel(checks_level)


def new_run_id() -> str:
    """A fresh run id, so a demo on a shared Redis never collides with an earlier one."""
    return f"demo-{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


def run_demo(
    settings: Settings,
    *,
    start_worker: bool = True,
    registry: ToolRegistry | None = None,
    on_call: Any = None,
    on_ready: Any = None,
    on_long: Any = None,
    web_port: int | None = None,
    linger: Any = None,
) -> DemoReport:
    """Runs the scripted agent run and returns what happened.

    Args:
        settings: where the store, broker and backend are; no ``redis_url`` means embedded.
        start_worker: run a worker thread here (else external workers must be running).
        registry: the tools; default: the one ``settings.tools`` names.
        on_call: called with each ``CallReport`` as it happens.
        on_ready: called with the report (mode and store known) before the first call.
        on_long: called with the long calls and their records each time they are read.
        web_port: serve the web view on 127.0.0.1 at this port while the demo runs.
        linger: called with the report at the end, while the store (and the web view) is
            still up: ``demo --web`` waits there for Ctrl-C.
    """
    started = time.monotonic()
    with ExitStack() as stack:
        embedded = settings.redis_url is None
        if embedded:
            url = stack.enter_context(embedded_redis())
            settings = settings.model_copy(update={"redis_url": url})
            start_worker = True
        registry = registry or load_registry(settings.tools)
        app = configure(settings, registry)
        report = DemoReport(
            run_id=new_run_id(),
            mode="embedded" if embedded else "redis",
            store=redis_location(settings.store_url),
        )
        runtime = get_runtime()
        # Each service answers, or the demo ends now with one line saying which does not.
        runtime.store.ping()
        check_broker(app, settings.publish_timeout_s)
        check_result_backend(app)
        if not start_worker:
            check_workers(app)
        if web_port is not None:
            from tasks.demo.browser import web_view

            base = stack.enter_context(web_view(settings, web_port))
            report.web_url = f"{base}/runs/{report.run_id}"
        if on_ready is not None:
            on_ready(report)
        if start_worker:
            stack.enter_context(worker_thread(app, embedded=embedded))
        boundary = runtime.boundary(CeleryDispatcher(app))
        run = RunContext(
            run_id=report.run_id,
            deadline=datetime.now(UTC) + timedelta(minutes=5),
            authorized_tools=AUTHORIZED_TOOLS,
            max_tool_calls=len(SCRIPT) + len(LONG_SCRIPT),
            max_calls_per_tool=TOOL_BUDGETS,
        )
        for step in SCRIPT:
            call = _make_call(boundary, run, step)
            report.calls.append(call)
            if on_call is not None:
                on_call(call)
        from tasks.worker.calls import reap_stuck_calls

        with reaper_thread(reap_stuck_calls):
            report.long_calls = run_long_calls(boundary, run, on_long)
        report.facts = boundary.observe(run)
        report.wall_s = time.monotonic() - started
        if linger is not None:
            linger(report)
    if linger is None:
        report.wall_s = time.monotonic() - started
    return report


def _make_call(boundary: Any, run: RunContext, step: Step) -> CallReport:
    envelope = ToolCallEnvelope(
        run_id=run.run_id,
        tool_call_id=step.tool_call_id,
        tool_name=step.tool,
        arguments=step.arguments,
    )
    began = time.perf_counter()
    # A wait that runs out returns the call's real state (PROJECTING), never an exception.
    outcome = boundary.invoke(envelope, run, timeout=CALL_TIMEOUT_S)
    if outcome.pending:
        # Still PROJECTING when the wait ran out: no worker took it (or it is stuck).
        return CallReport(
            step=step.label,
            tool=step.tool,
            tool_call_id=step.tool_call_id,
            status="TIMEOUT",
            evidence_status=None,
            error_code=None,
            latency_ms=(time.perf_counter() - began) * 1000,
            expected=False,
        )
    code = outcome.error_code
    return CallReport(
        step=step.label,
        tool=step.tool,
        tool_call_id=step.tool_call_id,
        status=outcome.status.value,
        evidence_status=(
            outcome.evidence_status.value if outcome.evidence_status is not None else None
        ),
        error_code=code.value if code is not None else None,
        latency_ms=(time.perf_counter() - began) * 1000,
        result=outcome.result,
        scope=outcome.scope,
        expected=outcome.status is step.expect_status and code is step.expect_error,
    )
