"""Re-projection with the current projectors, as jobs in real worker processes: a projector
upgrade's diff, the sealed records' bytes unchanged, side projections, cancel, and a job whose
worker was killed (SIGKILL) resumed to the same totals."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from starlette.testclient import TestClient
from typer.testing import CliRunner, Result

from boundary import (
    InProcessDispatcher,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.store import keys
from tasks.cli.main import EXIT_OK, EXIT_USAGE, cli
from tasks.exits import EXIT_PROJECTIONS_FAILED
from tasks.settings import Settings
from tasks.web.app import create_app
from tasks.wiring.app import REPROJECTIONS_QUEUE
from tests.celery.workers import celery_process, worker_args
from tests.support import reprojection_tools
from tests.support.helpers import binary_client, wait_until
from tests.support.reprojection_tools import SECRET, TOOL, make_registry

RUNS: dict[str, list[tuple[str, str, float]]] = {
    # call id, query, score
    "r1": [("c1", "a", 0.9), ("c2", "b", 0.2), ("c3", "none-x", 0.0), ("c4", "boom", 0.9)],
    "r2": [("c1", "none-y", 0.0)],
}


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, celery_settings: Settings, celery_session_app: Celery
) -> None:
    """The CLI's settings: the same DBs as the worker's (and the app pointed at them)."""
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", celery_settings.store_url)
    monkeypatch.setenv("TOOL_BOUNDARY_BROKER_URL", celery_settings.broker)
    monkeypatch.setenv("TOOL_BOUNDARY_RESULT_BACKEND", celery_settings.backend)
    monkeypatch.setenv("TOOL_BOUNDARY_TTL_S", str(celery_settings.ttl_s))


@pytest.fixture
def v1(redis_client: redis.Redis) -> ToolBoundary:
    """Writes runs with version 1 of the projector, steps in-process."""
    tools = make_registry("1")
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    return ToolBoundary(
        store=store, registry=tools, dispatcher=InProcessDispatcher(store, tools, inline=True)
    )


def write_runs(boundary: ToolBoundary, runs: dict[str, list[tuple[str, str, float]]]) -> None:
    for run_id, calls in runs.items():
        run = RunContext(run_id=run_id, authorized_tools=frozenset({TOOL}))
        for call_id, query, score in calls:
            envelope = ToolCallEnvelope(
                run_id=run_id,
                tool_call_id=call_id,
                tool_name=TOOL,
                arguments={"query": query, "score": score},
            )
            boundary.invoke(envelope, run, timeout=10)


@pytest.fixture
def worker_v2(
    celery_settings: Settings, tmp_path: Path, redis_client: redis.Redis
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A worker process on the ``reprojections`` queue with version 2 of the projector."""
    env = v2_env(tmp_path)
    log = tmp_path / "worker.log"
    with celery_process(celery_settings, *reprojection_worker("rp-a"), log=log, extra_env=env):
        yield log, env


def v2_env(tmp_path: Path) -> dict[str, str]:
    """A worker's environment: the test tools, version 2 of the projector, its files."""
    return {
        "TOOL_BOUNDARY_TOOLS": "tests.support.reprojection_tools:registry",
        reprojection_tools.VERSION_ENV: "2",
        reprojection_tools.HOLD_ENV: str(tmp_path / "hold"),
        reprojection_tools.DIE_ENV: str(tmp_path / "died"),
    }


def reprojection_worker(name: str) -> tuple[str, ...]:
    """A threads worker's arguments, on the ``reprojections`` queue only."""
    args = list(worker_args(name, concurrency=2))
    args[args.index("-Q") + 1] = REPROJECTIONS_QUEUE
    return tuple(args)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def reproject(out: Path, *args: str) -> tuple[Result, list[dict[str, Any]]]:
    result = invoke("reproject", "--projectors", "current", "--out", str(out), "--json", *args)
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return result, sorted(lines, key=lambda line: line["run_id"])


def record_bytes(client: redis.Redis) -> dict[str, Any]:
    """Every record's DUMP and fields: what must not change."""
    client = binary_client(client)
    found = {}
    for run_id, calls in RUNS.items():
        for call_id, _, _ in calls:
            key = f"tb:{{{run_id}}}:call:{call_id}"
            found[key] = (client.dump(key), client.hgetall(key))
    return found


def fact(call_id: str, evidence: str, result: Any, query: str, version: str) -> dict[str, Any]:
    return {
        "tool_call_id": call_id,
        "tool_name": TOOL,
        "evidence_status": evidence,
        "result": result,
        "scope": {"q": query},
        "projector_version": version,
    }


def test_a_projector_upgrade_gives_the_expected_diff_and_never_changes_a_record(
    cli_env: None,
    v1: ToolBoundary,
    worker_v2: tuple[Path, dict[str, str]],
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    # Given runs sealed by version 1 of the projector
    write_runs(v1, RUNS)
    before = record_bytes(redis_client)
    assert {h[b"projector_version"] for _, h in before.values() if b"evidence_status" in h} == {
        b"1"
    }

    # When a worker with version 2 re-projects them (a dry run)
    result, lines = reproject(tmp_path / "dry.jsonl", "--run", "r1", "--run", "r2")

    # Then each run's line holds the expected diff, and the job exits 5 (a failure)
    assert result.exit_code == EXIT_PROJECTIONS_FAILED, result.output
    assert "1 projection(s) failed (lookup: RuntimeError 1)" in result.output
    assert [line["run_id"] for line in lines] == ["r1", "r2"]
    r1, r2 = lines
    assert r1["changed"] is True and r1["records"] == 4
    assert (r1["records_changed"], r1["fields_changed"]) == (3, 3)
    why = r1["diff"].pop("diagnostics")
    assert r1["diff"] == {
        "added": [],
        "removed": [fact("c4", "EVIDENCE_FOUND", {"first": "doc-boom"}, "boom", "1")],
        "changed": [
            {
                "tool_call_id": "c1",
                "field": "result",
                "patch": [{"op": "add", "path": "/count", "value": 1}],
            },
            {
                "tool_call_id": "c2",
                "field": "evidence_status",
                "before": "EVIDENCE_FOUND",
                "after": "NO_EVIDENCE",
            },
            {
                "tool_call_id": "c2",
                "field": "result",
                "patch": [{"op": "replace", "path": "", "value": None}],
            },
        ],
        "failed": {"c4": "PROJECTION_FAILED"},
    }
    # (the live path's diagnostic: code, type and frame, never the message)
    assert set(why) == {"c4"}
    assert why["c4"]["error_code"] == "PROJECTION_FAILED"
    assert why["c4"]["exception_type"] == "RuntimeError"
    assert why["c4"]["function"] == "_project" and why["c4"]["line"] > 0
    assert why["c4"]["file"].endswith("reprojection_tools.py")
    assert "message" not in why["c4"]
    assert r2 == {
        "run_id": "r2",
        "changed": False,
        "records": 1,
        "records_changed": 0,
        "fields_changed": 0,
        "diff": {"added": [], "removed": [], "changed": [], "failed": {}},
    }
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["state"] == "done"
    assert (summary["runs"], summary["runs_changed"]) == (2, 1)
    assert (summary["records"], summary["records_changed"]) == (5, 3)
    assert (summary["removed"], summary["fields_changed"], summary["evidence_flips"]) == (1, 3, 1)
    assert summary["failed_by_code"] == {"PROJECTION_FAILED": 1}
    assert summary["evidence_flips_by_direction"] == {"EVIDENCE_FOUND -> NO_EVIDENCE": 1}
    assert summary["versions"] == {TOOL: "v1 -> v2"}
    assert summary["tools"][TOOL]["failed"] == {"RuntimeError": 1}
    assert summary["tools"][TOOL]["records"] == 5
    # And the worker logged the failure once, with its type and frame and the count
    log, _ = worker_v2
    warned = [
        line for line in log.read_text(errors="replace").splitlines()
        if "projector of tool lookup failed on 1 record(s)" in line
    ]  # fmt: skip
    assert len(warned) == 1 and "RuntimeError raised at" in warned[0], warned
    # And the sealed records are the same bytes, and nothing was written beside them
    assert record_bytes(redis_client) == before
    assert redis_client.keys("tb:{r1}:side:*") == []

    # When the same upgrade is written
    written, _ = reproject(
        tmp_path / "write.jsonl", "--run", "r1", "--run", "r2", "--write", "--job", "w1"
    )
    assert written.exit_code == EXIT_PROJECTIONS_FAILED, written.output
    assert record_bytes(redis_client) == before
    # (the failed projection is not written, nor counted as written)
    written_summary = json.loads(written.stdout.splitlines()[-1])
    assert (written_summary["written"], written_summary["failed"]) == (4, 1)
    assert redis_client.exists("tb:{r1}:side:c4:2") == 0

    # Then observe by version 2 gives the new facts, from side projections
    observed = invoke("observe", "r1", "--projector-version", "2", "--json")
    assert observed.exit_code == EXIT_OK, observed.output
    facts = json.loads(observed.output)
    assert facts["facts"] == [
        fact("c1", "EVIDENCE_FOUND", {"first": "doc-a", "count": 1}, "a", "2"),
        fact("c2", "NO_EVIDENCE", None, "b", "2"),
        fact("c3", "NO_EVIDENCE", None, "none-x", "2"),
        # (its new projection failed: nothing was written, so its sealed fact stays)
        fact("c4", "EVIDENCE_FOUND", {"first": "doc-boom"}, "boom", "1"),
    ]
    assert facts["excluded"] == {}
    assert v1.observe("r1", projector_version="2").model_dump(mode="json") == facts
    by_version = asyncio.run(v1.aobserve("r1", projector_version="2"))
    assert by_version.model_dump(mode="json") == facts
    # (the sealed facts are still version 1's)
    assert [f.projector_version for f in v1.observe("r1").facts] == ["1"] * 4
    # And every side projection expires no later than its record
    for run_id, calls in RUNS.items():
        for call_id, query, _ in calls:
            if query == "boom":
                continue
            # (absolute expiry times: two PTTLs read apart would race the clock)
            side = redis_client.execute_command("PEXPIRETIME", f"tb:{{{run_id}}}:side:{call_id}:2")
            record = redis_client.execute_command("PEXPIRETIME", f"tb:{{{run_id}}}:call:{call_id}")
            assert 0 < side <= record

    # And the web view's jobs page shows both jobs' progress
    with TestClient(create_app(v1.store)) as web:
        page = web.get("/jobs").text
        call_page = web.get("/runs/r1/calls/c1").text
        job_page = web.get("/jobs/w1").text
        forged = web.post("/jobs/w1/cancel", data={"csrf": "forged"})
        missing = web.get("/jobs/nosuchjob")
        live = web.get("/jobs/w1/events").text
    # (a job's page: its versions and failures by type; a forged cancel is refused)
    assert "v1 -&gt; v2" in job_page and "RuntimeError: 1" in job_page
    assert forged.status_code == 403 and missing.status_code == 404
    # (its live counts: an ended job's stream is one event, then it closes)
    events = [json.loads(e[len("data: ") :]) for e in live.split("\n\n") if e]
    assert len(events) == 1 and events[0]["state"] == "done" and events[0]["failed"] == 1
    assert "w1" in page and "done" in page and "PROJECTION_FAILED: 1" in page
    assert "v1 -&gt; v2" in page or "v1 -> v2" in page
    assert "projector version" in call_page

    # And the secret in the raw responses is in no line, summary, job, page or log
    log, _ = worker_v2
    texts = [
        page,
        result.output,
        written.output,
        observed.output,
        (tmp_path / "dry.jsonl").read_text(),
        (tmp_path / "write.jsonl").read_text(),
        log.read_text(errors="replace"),
        invoke("jobs", "--json").output,
        invoke("jobs", "show", "w1", "--json").output,
    ]
    for job_key in redis_client.keys("tb:{jobs}:*"):
        kind = redis_client.type(job_key)
        if kind == "hash":
            texts.append(repr(redis_client.hgetall(job_key)))
        elif kind == "stream":
            texts.append(repr(redis_client.xrange(job_key)))
    assert "projector v2 broke" not in "".join(texts)
    assert all(SECRET not in text for text in texts)


def test_the_same_job_id_follows_the_same_job(
    cli_env: None,
    v1: ToolBoundary,
    worker_v2: tuple[Path, dict[str, str]],
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    write_runs(v1, RUNS)
    first, lines = reproject(tmp_path / "a.jsonl", "--all", "--job", "same")
    again, lines_again = reproject(tmp_path / "b.jsonl", "--all", "--job", "same")

    assert first.exit_code == again.exit_code == EXIT_PROJECTIONS_FAILED
    assert "exists: following it" in again.output, first.output + again.output
    assert "exists: following it" in again.output
    assert lines == lines_again and [line["run_id"] for line in lines] == ["r1", "r2"]
    assert json.loads(first.stdout.splitlines()[-1]) == json.loads(again.stdout.splitlines()[-1])
    jobs = json.loads(invoke("jobs", "--json").output)
    assert [job["job_id"] for job in jobs] == ["same"]
    shown = json.loads(invoke("jobs", "show", "same", "--json").output)
    assert shown["state"] == "done" and shown["totals"]["runs"] == 2


def test_selectors_and_count(
    cli_env: None, v1: ToolBoundary, redis_client: redis.Redis, tmp_path: Path
) -> None:
    write_runs(v1, RUNS)
    # No selector is a usage error, whichever projectors
    for args in (["reproject"], ["reproject", "--projectors", "current"]):
        refused = invoke(*args)
        assert refused.exit_code == EXIT_USAGE
        assert "no selection" in refused.output
    assert invoke("reproject", "--run", "r1", "--all").exit_code == EXIT_USAGE
    assert invoke("reproject", "--status", "SLEEPING").exit_code == EXIT_USAGE
    assert invoke("reproject", "--tool", TOOL).exit_code == EXIT_USAGE  # sealed: no filters
    # --count answers from the runs index and the runs' counters
    counted = invoke("reproject", "--all", "--count", "--json")
    assert json.loads(counted.output) == {"runs": 2, "records": 5, "exact": True}
    by_tool = invoke("reproject", "--tool", TOOL, "--count", "--json")
    assert json.loads(by_tool.output)["records"] == 5
    errors = invoke("reproject", "--status", "ERROR", "--count", "--json")
    assert json.loads(errors.output) == {"runs": 0, "records": 0, "exact": True}
    listed = invoke("reproject", "--run", "r2", "--count", "--json")
    assert json.loads(listed.output) == {"runs": 1, "records": 1, "exact": True}


def wait_for(what: Any, timeout_s: float = 60.0) -> Any:
    return wait_until(what, "the job's state", timeout_s, every=0.1)


def job_state(job_id: str) -> dict[str, Any]:
    return json.loads(invoke("jobs", "show", job_id, "--json").output)


def test_cancel_stops_a_job_within_one_chunk(
    cli_env: None,
    v1: ToolBoundary,
    worker_v2: tuple[Path, dict[str, str]],
    tmp_path: Path,
) -> None:
    # Given six runs, the first one's call held in the projector
    runs = {f"h{n}": [("c1", "hold" if n == 0 else f"q{n}", 0.9)] for n in range(6)}
    write_runs(v1, runs)
    run_args = [arg for run_id in runs for arg in ("--run", run_id)]
    started = invoke(
        "reproject", "--projectors", "current", *run_args,
        "--job", "stop", "--lanes", "1", "--chunk-size", "1", "--detach",
    )  # fmt: skip
    assert started.exit_code == EXIT_OK, started.output
    _, env = worker_v2
    # (its chunk has started: the worker took the job)
    wait_for(lambda: job_state("stop")["taken"])

    # When the job is cancelled while its first chunk runs, and the chunk then ends
    cancelled = invoke("jobs", "cancel", "stop")
    assert cancelled.exit_code == EXIT_OK and "cancelling" in cancelled.output
    Path(env[reprojection_tools.HOLD_ENV]).touch()

    # Then the job stops, with at most that chunk done
    state = wait_for(lambda: (s := job_state("stop"))["state"] == "cancelled" and s)
    assert state["totals"].get("runs", 0) <= 1
    assert state["lanes_ended"] == 1
    again = invoke("jobs", "cancel", "stop")
    assert "cancelled already" in again.output


def test_a_job_killed_with_its_worker_resumes_to_the_same_totals(
    cli_env: None,
    v1: ToolBoundary,
    celery_settings: Settings,
    tmp_path: Path,
) -> None:
    # Given six runs of two calls, one of which kills its worker (SIGKILL) the first time
    runs = {
        f"k{n}": [("c1", "die" if n == 3 else f"q{n}", 0.9), ("c2", f"p{n}", 0.1)] for n in range(6)
    }
    write_runs(v1, runs)
    env = v2_env(tmp_path)
    run_args = [arg for run_id in runs for arg in ("--run", run_id)]
    common = ["reproject", "--projectors", "current", *run_args, "--lanes", "1"]
    with celery_process(
        celery_settings, *reprojection_worker("doomed"), log=tmp_path / "a.log", extra_env=env
    ) as doomed:
        started = invoke(*common, "--chunk-size", "2", "--job", "killed", "--detach")
        assert started.exit_code == EXIT_OK, started.output
        wait_for(lambda: doomed.poll() is not None)
    partial = job_state("killed")
    assert partial["state"] == "running" and partial["totals"].get("runs", 0) < 6

    # When the job is followed again with a new worker
    with celery_process(
        celery_settings, *reprojection_worker("heir"), log=tmp_path / "b.log", extra_env=env
    ):
        resumed, lines = reproject(
            tmp_path / "resumed.jsonl", *run_args, "--lanes", "1", "--job", "killed"
        )
        fresh, fresh_lines = reproject(
            tmp_path / "fresh.jsonl", *run_args, "--lanes", "1", "--job", "fresh"
        )

    # Then it ends with the totals of a job never interrupted, every run counted once
    assert resumed.exit_code == fresh.exit_code == EXIT_OK, resumed.output + fresh.output
    totals = json.loads(resumed.stdout.splitlines()[-1])
    fresh_totals = json.loads(fresh.stdout.splitlines()[-1])
    assert totals["job_id"] == "killed" and fresh_totals["job_id"] == "fresh"
    del totals["job_id"], fresh_totals["job_id"]
    assert totals == fresh_totals
    assert totals["runs"] == 6 and totals["records"] == 12
    assert [line["run_id"] for line in lines] == sorted(runs)
    assert lines == fresh_lines
    assert keys.job_key("killed") != keys.job_key("fresh")


def test_each_chunk_sends_a_progress_event_with_counts_only(
    cli_env: None,
    v1: ToolBoundary,
    worker_v2: tuple[Path, dict[str, str]],
    celery_session_app: Celery,
    tmp_path: Path,
) -> None:
    write_runs(v1, RUNS)
    events: list[dict[str, Any]] = []
    with celery_session_app.connection_for_read() as connection:
        receiver = celery_session_app.events.Receiver(connection, handlers={"*": events.append})
        listening = threading.Thread(
            target=lambda: receiver.capture(limit=None, timeout=None, wakeup=False), daemon=True
        )
        listening.start()
        try:
            # Subscribed once the worker's heartbeat comes through.
            wait_for(lambda: any(e["type"] == "worker-heartbeat" for e in events))
            result, _ = reproject(
                tmp_path / "lines.jsonl", "--all", "--lanes", "1", "--chunk-size", "1"
            )
            assert result.exit_code == EXIT_PROJECTIONS_FAILED, result.output
            progress = wait_for(
                lambda: (
                    [e for e in events if e["type"] == "task-progress"][1:]
                    and [e for e in events if e["type"] == "task-progress"]
                )
            )
        finally:
            receiver.should_stop = True
            listening.join(timeout=10)
    # One event per chunk (two runs, a chunk each, then the lane's last, empty, page)
    details = [json.loads(e["result"]) for e in progress]
    assert {d["job_id"] for d in details} == {details[0]["job_id"]}
    assert [d["runs"] for d in details][:2] == [0, 1]
    assert all(set(d) == {"job_id", "state", "chunks", "runs", "records",
                          "records_changed", "failed"} for d in details)  # fmt: skip
    assert SECRET not in json.dumps(progress)
