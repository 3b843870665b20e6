"""The ``tool-boundary`` CLI through typer's runner, against real Redis: output, ``--json``
parsed back, and exit codes (0 ok, 1 not found, 2 bad usage, 3 unreachable)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner, Result

from boundary import (
    ErrorCode,
    EvidenceStatus,
    Projection,
    RedisCanonicalStore,
    ToolBoundary,
    ToolRegistry,
    ToolSpec,
)
from boundary.fingerprint import request_sha256
from boundary.store import keys
from tasks.cli.main import EXIT_NOT_FOUND, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, cli
from tests.conftest import STORE_DB, redis_url
from tests.support.helpers import (
    RUN_ID,
    TOOL,
    create_projecting,
    envelope,
    expiry_commands,
    key_of,
    make_run,
    monitored,
)

#: Text only the raw response holds.
RAW_ONLY = "raw-only-c4a2"
#: A closed port, with a password that must never be printed.
UNREACHABLE_URL = "redis://:hunter2-pw@127.0.0.1:1/0"
RUN = make_run()


class QueryProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        if request["query"] == "nothing":
            return Projection(evidence_status=EvidenceStatus.NO_EVIDENCE, scope={"q": "nothing"})
        return Projection(
            evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"answer": request["query"]}
        )


def search(arguments: dict[str, Any]) -> dict[str, Any]:
    if arguments["query"] == "fail":
        raise RuntimeError("broken")
    return {"hits": [arguments["query"]], "internal": RAW_ONLY}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads the store's URL from the environment, like in production."""
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", redis_url(STORE_DB))


@pytest.fixture
def tools(registry: ToolRegistry) -> ToolRegistry:
    registry.register(
        ToolSpec(name=TOOL, executor=search, projector=QueryProjector(), read_only=True)
    )
    return registry


@pytest.fixture
def a_run(boundary: ToolBoundary, tools: ToolRegistry, store: RedisCanonicalStore) -> None:
    """run-1: c1 READY with evidence, c2 READY without, c3 ERROR, c4 PROJECTING."""
    for call_id, query in (("c1", "timeout"), ("c2", "nothing"), ("c3", "fail")):
        boundary.invoke(envelope(call_id, {"query": query}), RUN, timeout=5)
    create_projecting(store, "c4")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def one_error_line(result: Result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


# --- show -----------------------------------------------------------------------------------


def test_show_prints_the_record_but_not_the_raw_response(env: None, a_run: None) -> None:
    result = invoke("show", RUN_ID, "c1")

    assert result.exit_code == EXIT_OK, result.stderr
    for text in ("run-1", "c1", TOOL, "READY", "EVIDENCE_FOUND", '"query": "timeout"'):
        assert text in result.stdout
    assert '"answer": "timeout"' in result.stdout
    # The fingerprint (folded on a narrow terminal): its first characters after its name
    fingerprint = request_sha256(TOOL, '{"query":"timeout"}')
    assert any(
        line.split()[:2] == ["request_sha256", fingerprint[: len(line.split()[1])]]
        for line in result.stdout.splitlines()
        if line.startswith("request_sha256")
    )
    assert "hidden (--raw shows it)" in result.stdout
    assert RAW_ONLY not in result.stdout


def test_show_raw_prints_the_raw_response(env: None, a_run: None) -> None:
    result = invoke("show", RUN_ID, "c1", "--raw")

    assert result.exit_code == EXIT_OK, result.stderr
    assert RAW_ONLY in result.stdout


def test_show_json_parses_back_to_the_record(env: None, a_run: None) -> None:
    shown = json.loads(invoke("show", RUN_ID, "c1", "--json").stdout)
    with_raw = json.loads(invoke("show", RUN_ID, "c1", "--json", "--raw").stdout)

    assert shown["run_id"] == RUN_ID
    assert shown["tool_call_id"] == "c1"
    assert shown["status"] == "READY"
    assert shown["evidence_status"] == "EVIDENCE_FOUND"
    assert shown["request"] == {"query": "timeout"}
    assert shown["agent_result"] == {"answer": "timeout"}
    assert shown["seq"] == 1
    assert shown["request_sha256"] == request_sha256(TOOL, '{"query":"timeout"}')
    assert "raw" not in shown
    assert shown["raw_bytes"] == len(json.dumps(with_raw["raw"], separators=(",", ":")))
    assert with_raw["raw"] == {"hits": ["timeout"], "internal": RAW_ONLY}


def test_show_of_an_error_record_gives_its_code(env: None, a_run: None) -> None:
    shown = json.loads(invoke("show", RUN_ID, "c3", "--json").stdout)

    assert (shown["status"], shown["evidence_status"]) == ("ERROR", "ERROR")
    assert shown["error_code"] == "TOOL_EXECUTION_FAILED"
    assert shown["agent_result"] is None


def test_show_reads_without_touching_expiry(
    env: None, a_run: None, redis_client: redis.Redis
) -> None:
    ttl_before = redis_client.pttl(keys.record_key(key_of("c1")))

    with monitored(redis_client) as commands:
        assert invoke("show", RUN_ID, "c1", "--raw").exit_code == EXIT_OK

    assert "hgetall tb:{run-1}:call:c1" in commands
    assert expiry_commands(commands) == []
    assert redis_client.pttl(keys.record_key(key_of("c1"))) <= ttl_before


def test_show_escapes_terminal_control_characters(
    env: None, boundary: ToolBoundary, tools: ToolRegistry
) -> None:
    boundary.invoke(envelope("c1", {"query": "a\u009b31mred\u202eevil"}), RUN, timeout=5)

    result = invoke("show", RUN_ID, "c1")

    assert "\u009b" not in result.stdout
    assert "\u202e" not in result.stdout
    assert "\\u009b31mred\\u202eevil" in result.stdout


def test_show_of_an_unknown_record_exits_1(env: None, a_run: None) -> None:
    result = invoke("show", RUN_ID, "nope")

    assert result.exit_code == EXIT_NOT_FOUND
    assert "RECORD_NOT_FOUND" in one_error_line(result)
    assert result.stdout == ""


# --- runs -----------------------------------------------------------------------------------


def test_runs_lists_each_run_with_counts_by_status(
    env: None, a_run: None, boundary: ToolBoundary
) -> None:
    boundary.invoke(envelope("x1", {"query": "disk"}, run_id="run-2"), make_run("run-2"), timeout=5)

    listed = json.loads(invoke("runs", "--json").stdout)
    table = invoke("runs")

    running = [row.pop("running") for row in listed]
    assert listed == [
        {"run_id": "run-1", "calls": 4, "ready": 2, "error": 1, "projecting": 1},
        {"run_id": "run-2", "calls": 1, "ready": 1, "error": 0, "projecting": 0},
    ]
    # the call still PROJECTING is named (its tool has not started: no progress yet)
    assert [[(r["tool_call_id"], r["started"], r["fraction"]) for r in rs] for rs in running] == [
        [("c4", False, None)],
        [],
    ]
    assert table.exit_code == EXIT_OK
    assert "c4 queued" in table.stdout
    assert "run-1" in table.stdout
    assert "run-2" in table.stdout


def test_runs_reads_and_prints_the_index_a_step_at_a_time_in_its_order(
    env: None, store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks.cli.records
    from boundary.store import redis as redis_store

    # Given five runs, read and printed two at a time
    for n in (3, 0, 4, 1, 2):
        create_projecting(store, "c1", run_id=f"s-{n}")
    in_order = list(store.run_ids())
    monkeypatch.setattr(redis_store, "RUN_IDS_PAGE", 2)
    monkeypatch.setattr(tasks.cli.records, "RUNS_PER_STEP", 2)
    asked: list[int] = []
    summaries = RedisCanonicalStore.run_summaries

    def recorded(self: RedisCanonicalStore, run_ids: Any) -> Any:
        asked.append(len(run_ids))
        return summaries(self, run_ids)

    monkeypatch.setattr(RedisCanonicalStore, "run_summaries", recorded)
    # When the runs are listed, as JSON and as a table
    listed = invoke("runs", "--json")
    table = invoke("runs")
    # Then the JSON is one list of every run, in the index's order (one JSON text, as
    # before), each with its call in flight
    rows = json.loads(listed.stdout)
    assert listed.stdout.count("\n") == 1
    assert [r["run_id"] for r in rows] == in_order
    assert all(r["projecting"] == 1 and len(r["running"]) == 1 for r in rows)
    # And the table names every run
    assert table.exit_code == EXIT_OK and all(r in table.stdout for r in in_order)
    # And no step read more than two runs' counts
    assert asked == [2, 2, 1] * 2


def test_runs_of_an_empty_store(env: None, redis_client: redis.Redis) -> None:
    assert json.loads(invoke("runs", "--json").stdout) == []
    assert invoke("runs").stdout.strip() == "no runs"


# --- observe --------------------------------------------------------------------------------


def test_observe_json_is_what_the_boundary_observes(
    env: None, a_run: None, boundary: ToolBoundary
) -> None:
    result = invoke("observe", RUN_ID, "--json")

    assert result.exit_code == EXIT_OK, result.stderr
    observed = json.loads(result.stdout)
    assert observed == boundary.observe(RUN).model_dump(mode="json")
    assert [f["tool_call_id"] for f in observed["facts"]] == ["c1", "c2"]
    # (c4 is still running: counted, not a fact)
    assert observed["excluded"] == {"error": 1, "projecting": 1}


def test_observe_marks_no_evidence_facts_negative(env: None, a_run: None) -> None:
    result = invoke("observe", RUN_ID)

    assert result.exit_code == EXIT_OK, result.stderr
    assert "2 fact(s), 1 with evidence, 1 negative" in result.stdout
    assert "NO_EVIDENCE (negative)" in result.stdout
    assert "excluded: error 1, projecting 1" in result.stdout


def test_observe_of_an_unknown_run_exits_1(env: None, a_run: None) -> None:
    result = invoke("observe", "run-nobody", "--json")

    assert result.exit_code == EXIT_NOT_FOUND
    assert "run-nobody" in one_error_line(result)


# --- reproject (what needs no worker; the rest is in tests/celery/test_reproject.py) --------


def test_reproject_of_an_unknown_run_exits_1_before_sending_anything(
    env: None, a_run: None
) -> None:
    result = invoke("reproject", "--run", RUN_ID, "--run", "run-nobody")

    assert result.exit_code == EXIT_NOT_FOUND
    assert "run-nobody" in one_error_line(result)
    assert result.stdout == ""


# --- exit codes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["nope"],
        ["show"],
        ["show", RUN_ID],
        ["show", "run 1", "c1"],
        ["show", RUN_ID, "c{1}"],
        ["observe", "run:1"],
        ["reproject"],
        ["reproject", "--all", "--run", RUN_ID],
        ["reproject", "--run", "a}b"],
        ["reproject", "--all", "--chunk-size", "0"],
        ["runs", "--bogus"],
    ],
)
def test_bad_usage_exits_2(env: None, redis_client: redis.Redis, args: list[str]) -> None:
    result = invoke(*args)

    assert result.exit_code == EXIT_USAGE, result.output
    assert "Traceback" not in result.output


def test_bad_settings_exit_2_with_one_line(env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_BOUNDARY_TTL_S", "-5")

    result = invoke("runs")

    assert result.exit_code == EXIT_USAGE
    assert "TOOL_BOUNDARY_TTL_S" in one_error_line(result)


@pytest.mark.parametrize(
    "args",
    [
        ["show", RUN_ID, "c1"],
        ["show", RUN_ID, "c1", "--json", "--raw"],
        ["runs"],
        ["runs", "--json"],
        ["observe", RUN_ID],
        ["observe", RUN_ID, "--json"],
        ["reproject", "--all"],
        ["reproject", "--run", RUN_ID, "--json"],
    ],
)
def test_unreachable_store_gives_one_line_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", UNREACHABLE_URL)

    result = invoke(*args)

    assert result.exit_code == EXIT_UNAVAILABLE
    line = one_error_line(result)
    assert line == "error: the store at 127.0.0.1:1/0 is unreachable (STORE_UNAVAILABLE)"
    assert "hunter2" not in result.output
    assert result.stdout == ""


def test_console_script_prints_one_line_when_the_store_is_unreachable() -> None:
    script = Path(sys.executable).with_name("tool-boundary")
    env = {"TOOL_BOUNDARY_REDIS_URL": UNREACHABLE_URL, "PATH": "/usr/bin:/bin"}

    done = subprocess.run(
        [str(script), "observe", RUN_ID],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )

    assert done.returncode == EXIT_UNAVAILABLE
    assert done.stderr == ("error: the store at 127.0.0.1:1/0 is unreachable (STORE_UNAVAILABLE)\n")
    assert done.stdout == ""


# --- watch ----------------------------------------------------------------------------------


def test_watch_follows_the_calls_in_flight_until_none_is_running(
    env: None, a_run: None, store: RedisCanonicalStore
) -> None:
    # Given a run with c4 in flight, its tool started and reporting progress
    key = key_of("c4")
    store.claim(key, attempt=1, heartbeat_timeouts={})
    store.heartbeat(key, attempt=1, progress=0.3, message="3 of 10", heartbeat_timeout_s=None)
    # When c4 ends while the run is watched
    ends = threading.Timer(0.5, lambda: store.seal_error(key, ErrorCode.CANCELLED))
    ends.start()
    result = invoke("watch", RUN_ID, "--json", "--interval", "0.1")
    ends.join()
    # Then each read named c4 with its progress until a read found nothing running
    assert result.exit_code == EXIT_OK, result.stderr
    reads = [json.loads(line) for line in result.stdout.splitlines()]
    assert reads[-1] == {"run_id": RUN_ID, "running": []}
    (first,) = reads[0]["running"]
    assert (first["tool_call_id"], first["fraction"], first["message"]) == ("c4", 0.3, "3 of 10")
    assert first["started"] is True and first["attempt"] == 1
    # And the request and raw response never appear
    assert "query" not in result.stdout and RAW_ONLY not in result.stdout


def test_watch_of_an_unknown_run_fails_in_one_line(env: None, redis_client: redis.Redis) -> None:
    result = invoke("watch", "no-such-run")
    assert result.exit_code == EXIT_NOT_FOUND
    assert "no run no-such-run" in result.stderr


def test_show_prints_the_attempt_and_the_progress_of_a_running_call(
    env: None, a_run: None, store: RedisCanonicalStore
) -> None:
    key = key_of("c4")
    store.claim(key, attempt=1, heartbeat_timeouts={})
    store.heartbeat(key, attempt=1, progress=0.75, message="nearly", heartbeat_timeout_s=None)
    shown = json.loads(invoke("show", RUN_ID, "c4", "--json").stdout)
    assert (shown["attempt"], shown["progress"], shown["progress_message"]) == (1, 0.75, "nearly")
    assert shown["started_at"] and shown["heartbeat_at"]
    assert "nearly" in invoke("show", RUN_ID, "c4").stdout


# --- at 80 columns ----------------------------------------------------------------------------

#: A terminal's width the CLI's output must keep whole at.
NARROW = 80


def test_show_keeps_the_request_fingerprint_whole_at_80_columns(
    env: None, a_run: None, store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(NARROW))
    record = store.get(key_of("c1"))
    assert record is not None and record.request_sha256 is not None
    result = invoke("show", RUN_ID, "c1")
    assert result.exit_code == EXIT_OK, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= NARROW
    # The 64 hex digits on one line, never folded mid-hash
    assert any(record.request_sha256 in line for line in lines), result.stdout
    assert "run_id" in result.stdout and "raw" in result.stdout  # the fields around it too


def test_show_json_of_a_missing_call_prints_a_json_error(env: None, a_run: None) -> None:
    result = invoke("show", RUN_ID, "nope", "--json")
    assert result.exit_code == EXIT_NOT_FOUND
    assert json.loads(result.stdout) == {
        "error": "RECORD_NOT_FOUND",
        "run_id": RUN_ID,
        "tool_call_id": "nope",
    }
    assert "RECORD_NOT_FOUND" in one_error_line(result)


def test_watch_folds_a_long_message_at_80_columns_instead_of_cutting_it(
    env: None, a_run: None, store: RedisCanonicalStore
) -> None:
    from datetime import UTC, datetime

    from rich.console import Console

    from tasks.cli.watch import _bars, in_flight
    from tasks.views import call_view

    # Given a running call whose tool said something long
    message = "reading partition 17 of 24 from the archive, 1.2 GB so far, 3 retries"
    key = key_of("c4")
    store.claim(key, attempt=1, heartbeat_timeouts={})
    store.heartbeat(key, attempt=1, progress=0.4, message=message, heartbeat_timeout_s=None)
    # When watch draws its bars at 80 columns
    records = in_flight(store, RUN_ID)
    now = datetime.now(UTC)
    console = Console(width=NARROW, record=True, color_system=None, force_terminal=False)
    console.print(_bars([call_view(r, now) for r in records], now, records))
    drawn = console.export_text()
    # Then every word of the message is there, whole, and nothing is wider than the terminal
    assert max(len(line) for line in drawn.splitlines()) <= NARROW
    words = drawn.split()
    assert all(word in words for word in message.split()), drawn
    assert "…" not in drawn
