"""`tool-boundary demo`, run as a user runs it (a subprocess), in both modes; its JSON output
is checked call by call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

from boundary import CanonicalKey, InvocationStatus
from tasks.demo.script import SCRIPT
from tasks.runtime import get_runtime
from tests.celery.workers import ROOT, celery_process, settings_env, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.servers import free_port, release_port

EXPECTED = [
    ("search_docs", "call_search_1", "READY", "EVIDENCE_FOUND", None),
    ("search_logs", "call_logs_1", "READY", "EVIDENCE_FOUND", None),
    ("sql_read", "call_sql_1", "READY", "EVIDENCE_FOUND", None),
    ("search_docs", "call_search_2", "READY", "NO_EVIDENCE", None),
    ("search_docs", "call_search_1", "ERROR", "ERROR", "DUPLICATE_TOOL_CALL"),
    ("delete_rows", "call_delete_1", "ERROR", "ERROR", "UNAUTHORIZED"),
    ("search_docs", "call_search_3", "ERROR", "ERROR", "TOOL_BUDGET_EXHAUSTED"),
    ("dump_table", "call_dump_1", "ERROR", "ERROR", "RESULT_TOO_LARGE"),
]


def run_demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tasks.cli", "demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def real_redis_env() -> dict[str, str]:
    """The demo against the test Redis; the examples' tools, a broker DB of its own."""
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), tools="tasks.demo.tools:registry"
    )
    # The examples' own raw limit (1 MiB), not the Celery tests' small one.
    env = settings_env(settings)
    del env["TOOL_BOUNDARY_MAX_RAW_BYTES"]
    return env


def assert_scripted(report: dict[str, Any]) -> None:
    assert len(report["calls"]) == len(SCRIPT) == len(EXPECTED)
    for call, (tool, call_id, status, evidence, code) in zip(
        report["calls"], EXPECTED, strict=True
    ):
        assert (call["tool"], call["tool_call_id"]) == (tool, call_id)
        assert (call["status"], call["evidence_status"], call["error_code"]) == (
            status,
            evidence,
            code,
        ), call
        assert call["expected"] is True
        if status == "ERROR":
            assert call["result"] is None
    # The agent-facing results are the projections, never the raw responses.
    search, logs, sql = (report["calls"][i]["result"] for i in range(3))
    assert search["hits"] and search["hits"][0]["doc_id"].startswith("timeouts")
    assert logs["by_level"] == {"ERROR": logs["matches"]}
    assert sql["columns"] == ["service", "incidents"] and sql["row_count"] >= 1
    # Facts: the four READY calls in acceptance order; the no-evidence one stays negative.
    facts = report["facts"]
    assert [f["tool_call_id"] for f in facts["facts"]] == [
        "call_search_1",
        "call_logs_1",
        "call_sql_1",
        "call_search_2",
        "call_scan_1",
        "call_scan_3",
        "call_audit_1",
        "call_audit_2",
    ]
    assert facts["facts"][3]["evidence_status"] == "NO_EVIDENCE"
    assert facts["facts"][3]["scope"]["query"] == "quantum entanglement billing"
    # (the raw response too large, and the cancelled long call)
    assert facts["excluded"] == {"error": 2}
    # The long calls: one to its end, one cancelled mid-way, one retried after a lost worker
    long_calls = {c["tool_call_id"]: c for c in report["long_calls"]}
    assert [(c["status"], c["error_code"], c["attempt"]) for c in long_calls.values()] == [
        ("READY", None, 1),
        ("ERROR", "CANCELLED", 1),
        ("READY", None, 2),
        ("READY", None, 1),
        ("READY", None, 1),
    ]
    assert long_calls["call_scan_2"]["stopped_at"].startswith("hour ")
    # (audit_metrics runs one at a time: its second call waited in line for the first's slot)
    assert long_calls["call_audit_2"]["waited_for_slot"] is True
    assert all(c["expected"] for c in long_calls.values())
    assert facts["omitted"] == 0
    assert report["ok"] is True


def test_demo_runs_on_the_embedded_default_with_no_redis_configured() -> None:
    done = run_demo(clean_env(), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["mode"] == "embedded"
    assert_scripted(report)


def test_demo_prints_readable_tables(tmp_path: Path) -> None:
    done = run_demo(clean_env() | {"COLUMNS": "120"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "embedded Redis-protocol server" in done.stdout
    rows = [row for row in done.stdout.splitlines() if "call_" in row]
    for number, (tool, call_id, status, evidence, code) in enumerate(EXPECTED, start=1):
        line = next(row for row in rows if row.startswith(f"│ {number} │"))
        assert all(part in line for part in (tool, call_id, status, code or evidence)), line
    assert "Observed facts of run demo-" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_demo_runs_on_real_redis_with_its_worker_thread(
    redis_client: redis.Redis, celery_session_app: object
) -> None:
    done = run_demo(real_redis_env(), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["mode"] == "redis"
    assert_scripted(report)
    # The canonical records are in the configured Redis, raw response included.
    record = get_runtime().store.get(
        CanonicalKey(run_id=report["run_id"], tool_call_id="call_sql_1")
    )
    assert record is not None and record.status is InvocationStatus.READY
    assert record.raw is not None and '"rows"' in record.raw


def test_demo_with_no_worker_uses_external_workers(
    redis_client: redis.Redis, celery_session_app: object, tmp_path: Path
) -> None:
    env = real_redis_env()
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), tools="tasks.demo.tools:registry"
    )
    flush_db(SUBPROCESS_BROKER_DB)
    # (the long calls run on the "long" queue: the Procfile's worker_long)
    args = [
        q if q != "tools,projections" else "tools,long,projections" for q in worker_args("external")
    ]
    with celery_process(settings, *args, log=tmp_path / "worker.log", extra_env=env):
        done = run_demo(env, "--no-worker", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert_scripted(json.loads(done.stdout))
    assert "tool_boundary.execute[demo-" in (tmp_path / "worker.log").read_text()


def test_demo_no_worker_without_a_redis_url_is_bad_usage() -> None:
    done = run_demo(clean_env(), "--no-worker")
    assert done.returncode == 2
    assert done.stderr.startswith("error: --no-worker needs TOOL_BOUNDARY_REDIS_URL")


@pytest.mark.parametrize("flag", ["--help"])
def test_demo_help_explains_the_modes(flag: str) -> None:
    done = run_demo(clean_env() | {"COLUMNS": "120"}, flag)
    assert done.returncode == 0
    assert "embeds a Redis-protocol server" in done.stdout
    assert "--no-worker" in done.stdout


def test_demo_web_serves_the_run_in_the_web_view_until_ctrl_c() -> None:
    pytest.importorskip("starlette")
    port = free_port()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tasks.cli", "demo", "--web", "--web-port", str(port), "--json"],
            cwd=ROOT, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            # Given the demo's report, printed once the run is done (the web view stays up)
            report = json.loads(proc.stdout.readline())
            assert report["ok"] is True
            url = report["web_url"]
            assert url == f"http://127.0.0.1:{port}/runs/{report['run_id']}"
            # When the run's page is read
            with urllib.request.urlopen(url, timeout=10) as page:
                html = page.read().decode()
            # Then it shows every call of the run, the long ones' ends included
            for call_id in ("call_search_1", "call_dump_1", "call_scan_2", "call_scan_3"):
                assert f'id="call-{call_id}"' in html
            assert "CANCELLED" in html and "RESULT_TOO_LARGE" in html
            # And Ctrl-C ends it, in one line
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 130
            assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        release_port(port)
