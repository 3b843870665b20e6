"""A tool author can debug a failed call: the worker logs, at WARNING, the tool, the error
code, the exception's type and the frame that raised it (never the message), and the record
keeps the same diagnostic for ``tool-boundary show``. Nothing of it reaches the agent."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from boundary import (
    CanonicalKey,
    ErrorCode,
    InvocationStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
)
from boundary.diagnostics import Diagnostic
from tasks import CeleryDispatcher
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.workers import ROOT, celery_process, settings_env, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.celery_tools import SECRET, RaisingProjector, boom, lookup, registry

TOOLS_FILE = str(Path(inspect.getfile(boom)))
#: The line of ``raise`` in each: the first line of the body.
BOOM_LINE = inspect.getsourcelines(boom)[1] + 1
PROJECT_LINE = inspect.getsourcelines(RaisingProjector.project)[1] + 1
#: The store the worker uses (the test DB), whatever this process's runtime points at.
STORE = RedisCanonicalStore.from_url(celery_test_settings().store_url, ttl_s=600)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToolBoundary, Path]]:
    """A real worker process with the test tools; the caller's registry also has ``ghost``,
    which the worker's lacks (a deployment mismatch)."""
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))
    broker = flush_db(SUBPROCESS_BROKER_DB)
    log = tmp_path_factory.mktemp("diagnostics") / "worker.log"
    callers = ToolRegistry(list(registry))
    callers.register(
        ToolSpec(name="ghost", executor=lookup, projector=RaisingProjector(), read_only=True)
    )
    app = create_app(settings, name="tests_diagnostics")
    with celery_process(settings, *worker_args("diagnostics"), log=log):
        boundary = ToolBoundary(store=STORE, registry=callers, dispatcher=CeleryDispatcher(app))
        yield boundary, log
    broker.flushdb()


def call(boundary: ToolBoundary, call_id: str, tool: str) -> ToolOutcome:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments={"query": SECRET}
    )
    run = RUN.model_copy(update={"authorized_tools": RUN.authorized_tools | {"ghost"}})
    return boundary.invoke(envelope, run, timeout=30)


def diagnostic_of(call_id: str) -> Diagnostic:
    record = STORE.get(CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id))
    assert record is not None and record.status is InvocationStatus.ERROR
    assert record.diagnostic is not None
    return record.diagnostic


def warning_lines(log: Path, call_id: str) -> list[str]:
    return [
        line
        for line in log.read_text(errors="replace").splitlines()
        if "WARNING" in line and f":{call_id}" in line
    ]


@pytest.mark.parametrize(
    ("call_id", "tool", "code", "stage", "function", "line"),
    [
        ("diag-tool", "boom", ErrorCode.TOOL_EXECUTION_FAILED, "execute", "boom", BOOM_LINE),
        (
            "diag-projector",
            "bad_projector",
            ErrorCode.PROJECTION_FAILED,
            "project",
            "project",
            PROJECT_LINE,
        ),
    ],
)
def test_a_raising_tool_or_projector_is_logged_and_kept_with_type_and_frame(
    worker: tuple[ToolBoundary, Path],
    redis_client: redis.Redis,
    call_id: str,
    tool: str,
    code: ErrorCode,
    stage: str,
    function: str,
    line: int,
) -> None:
    boundary, log = worker

    # When a call's tool (or its projector) raises, with a secret in its message
    outcome = call(boundary, call_id, tool)

    # Then the agent gets the code only
    assert outcome.error_code is code
    assert "RuntimeError" not in outcome.model_dump_json()
    # And the record keeps the type and the raising frame, not the message
    diagnostic = diagnostic_of(call_id)
    assert (diagnostic.tool_name, diagnostic.error_code, diagnostic.stage) == (tool, code, stage)
    assert diagnostic.exception_type == "RuntimeError"
    assert (diagnostic.file, diagnostic.function, diagnostic.line) == (TOOLS_FILE, function, line)
    assert SECRET not in diagnostic.model_dump_json()
    # And the worker logged the same at WARNING, in one line, without the message
    lines = warning_lines(log, call_id)
    assert len(lines) == 1, log.read_text()[-3000:]
    for part in (tool, code.value, "RuntimeError", f"{TOOLS_FILE}:{line}", f"in {function}"):
        assert part in lines[0], lines[0]
    assert SECRET not in log.read_text()


def test_a_tool_missing_from_the_workers_registry_says_so(
    worker: tuple[ToolBoundary, Path], redis_client: redis.Redis
) -> None:
    boundary, log = worker

    outcome = call(boundary, "diag-ghost", "ghost")

    assert outcome.error_code is ErrorCode.TOOL_EXECUTION_FAILED
    diagnostic = diagnostic_of("diag-ghost")
    assert diagnostic.exception_type is None
    assert diagnostic.note is not None and "not in this worker's registry" in diagnostic.note
    (line,) = warning_lines(log, "diag-ghost")
    assert "ghost" in line and "not in this worker's registry" in line


def test_show_prints_the_diagnostic_to_the_harness(
    worker: tuple[ToolBoundary, Path], redis_client: redis.Redis
) -> None:
    boundary, _ = worker
    call(boundary, "diag-show", "boom")
    env = settings_env(celery_test_settings())

    table = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "show", RUN.run_id, "diag-show"],
        cwd=ROOT,
        env=env | {"COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "show", RUN.run_id, "diag-show", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout

    row = next(line for line in table.splitlines() if line.startswith("diagnostic"))
    assert f"execute step: RuntimeError raised at {TOOLS_FILE}:{BOOM_LINE} in boom" in row
    shown = json.loads(as_json)["diagnostic"]
    assert shown["exception_type"] == "RuntimeError" and shown["line"] == BOOM_LINE
    # (the request shown beside it holds the secret: Harness data; the diagnostic does not)
    assert SECRET not in json.dumps(shown) + row
