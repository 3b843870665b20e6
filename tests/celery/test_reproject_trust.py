"""Re-projection a person can trust: bad input refused before a job exists, no worker found up
front, a job no worker took cancelled at once, a job cancelled elsewhere with its own exit
code, ``--write`` adding nothing for the sealed version, ``observe`` of a version no job wrote,
a report bounded in bytes that expires, and ``jobs delete`` leaving no key."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import redis
from typer.testing import CliRunner, Result

from boundary import InProcessDispatcher, RedisCanonicalStore, ToolBoundary, ToolRegistry
from boundary.reprojection import Reprojector, Selection, summary
from boundary.store import keys
from boundary.store.redis_jobs import Checkpoint, RedisJobs
from tasks.cli.main import EXIT_NOT_FOUND, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, cli
from tasks.exits import EXIT_CANCELLED, EXIT_INTERRUPTED
from tasks.settings import Settings
from tasks.wiring.app import REPROJECTIONS_QUEUE
from tests.celery.test_reproject_jobs import (
    RUNS,
    cli_env,  # noqa: F401 (a fixture)
    job_state,
    reproject,
    v1,  # noqa: F401 (a fixture)
    wait_for,
    worker_v2,  # noqa: F401 (a fixture)
    write_runs,
)
from tests.celery.workers import ROOT, settings_env
from tests.integration.test_process_failures import clean_env
from tests.support import reprojection_tools
from tests.support.reprojection_tools import TOOL, make_registry


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def jobs_now() -> list[dict[str, Any]]:
    return json.loads(invoke("jobs", "--json").output)


def test_bad_input_is_refused_before_a_job_exists(
    cli_env: None,  # noqa: F811
    v1: ToolBoundary,  # noqa: F811
    tmp_path: Path,
) -> None:
    write_runs(v1, RUNS)
    current = ["reproject", "--projectors", "current"]
    cases: list[tuple[list[str], int, str]] = [
        (["--run", "nosuchrun"], EXIT_NOT_FOUND, "no run nosuchrun"),
        (["--tool", "nosuchtool"], EXIT_NOT_FOUND, "no tool 'nosuchtool'"),
        (["--all", "--since", "2026-12-02", "--until", "2026-12-01"], EXIT_USAGE, "is after"),
        (["--all", "--since", "1e+23"], EXIT_USAGE, "outside"),
        (["--all", "--rate", "1e+23/1"], EXIT_USAGE, "--rate"),
        (["--all", "--chunk-size", "99999999999999999999"], EXIT_USAGE, "chunk-size"),
        (["--all", "--out", str(tmp_path / "no" / "such" / "dir.jsonl")], EXIT_USAGE, "cannot"),
    ]
    for args, code, words in cases:
        refused = invoke(*current, *args)
        assert refused.exit_code == code, (args, refused.output)
        assert words in refused.output, (args, refused.output)
    # The sealed reader refuses an unknown run the same way
    assert invoke("reproject", "--run", "nosuchrun").exit_code == EXIT_NOT_FOUND
    # And no job was created by any of them
    assert jobs_now() == []


def test_no_worker_on_reprojections_is_found_up_front_and_an_untaken_job_cancels_at_once(
    cli_env: None,  # noqa: F811
    v1: ToolBoundary,  # noqa: F811
    celery_settings: Settings,
    tmp_path: Path,
) -> None:
    write_runs(v1, RUNS)
    # No worker consumes the reprojections queue: exit 3 at once, no job
    refused = invoke("reproject", "--projectors", "current", "--all", "--job", "nobody")
    assert refused.exit_code == EXIT_UNAVAILABLE, refused.output
    assert "no worker consumes reprojections" in refused.output
    assert jobs_now() == []
    # --detach starts it all the same; no worker takes it, and a cancel ends it at once
    started = invoke("reproject", "--projectors", "current", "--all", "--job", "idle", "--detach")
    assert started.exit_code == EXIT_OK, started.output
    cancelled = invoke("jobs", "cancel", "idle")
    assert (
        cancelled.exit_code == EXIT_OK and "cancelled (no worker had taken it)" in cancelled.output
    )
    state = job_state("idle")
    assert state["state"] == "cancelled" and state["lanes_ended"] == state["lanes"]
    # (its lanes' messages wait in the broker: gone with the test, as no worker took them)
    broker = redis.Redis.from_url(celery_settings.broker)
    try:
        broker.delete(*broker.keys(f"{REPROJECTIONS_QUEUE}*") or ["-"])
    finally:
        broker.close()


def test_a_job_cancelled_elsewhere_exits_with_its_own_code(
    cli_env: None,  # noqa: F811
    v1: ToolBoundary,  # noqa: F811
    worker_v2: tuple[Path, dict[str, str]],  # noqa: F811
    tmp_path: Path,
) -> None:
    runs = {f"h{n}": [("c1", "hold" if n == 0 else f"q{n}", 0.9)] for n in range(4)}
    write_runs(v1, runs)
    run_args = [arg for run_id in runs for arg in ("--run", run_id)]
    _, env = worker_v2
    common = ["--lanes", "1", "--chunk-size", "1", "--job", "away"]
    started = invoke("reproject", "--projectors", "current", *run_args, *common, "--detach")
    assert started.exit_code == EXIT_OK, started.output
    wait_for(lambda: job_state("away")["taken"])

    def elsewhere() -> None:
        assert invoke("jobs", "cancel", "away").exit_code == EXIT_OK
        Path(env[reprojection_tools.HOLD_ENV]).touch()

    cancelling = threading.Thread(target=elsewhere)
    cancelling.start()
    cancelling.join()
    followed, _ = reproject(tmp_path / "away.jsonl", *run_args, *common)
    assert followed.exit_code == EXIT_CANCELLED, followed.output
    assert "was cancelled" in followed.output


def test_write_adds_nothing_for_the_sealed_version_and_observe_names_the_versions(
    cli_env: None,  # noqa: F811
    worker_v2: tuple[Path, dict[str, str]],  # noqa: F811
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    # Given runs sealed by version 2 (the workers' version)
    tools = make_registry("2")
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    v2 = ToolBoundary(
        store=store, registry=tools, dispatcher=InProcessDispatcher(store, tools, inline=True)
    )
    write_runs(v2, {"s1": [("c1", "a", 0.9), ("c2", "none-z", 0.0)]})
    # When they are re-projected with --write
    result, lines = reproject(tmp_path / "same.jsonl", "--run", "s1", "--write")
    # Then nothing is written: the version is the sealed one
    assert result.exit_code == EXIT_OK, result.output
    summary = json.loads(result.stdout.splitlines()[-1])
    assert (summary["written"], summary["same_version"], summary["records"]) == (0, 2, 2)
    assert summary["versions"] == {TOOL: "v2 -> v2"}
    # (a job's runs are the runs selected: what --count counts)
    counted = json.loads(invoke("reproject", "--tool", TOOL, "--count", "--json").output)
    by_tool, _ = reproject(tmp_path / "tool.jsonl", "--tool", TOOL)
    assert json.loads(by_tool.stdout.splitlines()[-1])["runs"] == counted["runs"] == 1
    assert lines[0]["written"] == 0 and lines[0]["changed"] is False
    assert redis_client.keys("tb:{s1}:side*") == []
    # And observe of a version no job wrote exits 1, naming the versions present
    for asked in ("7", "v2"):
        missing = invoke("observe", "s1", "--projector-version", asked)
        assert missing.exit_code == EXIT_NOT_FOUND, missing.output
        assert f"version '{asked}'" in missing.output and "versions present: 2" in missing.output
    shown = invoke("observe", "s1", "--projector-version", "2")
    assert shown.exit_code == EXIT_OK and "facts by projector version: v2 2" in shown.output


def kept_in_redis(job_id: str, client: redis.Redis) -> int:
    """Bytes a job's keys take in Redis, as MEMORY USAGE counts them (exactly, and as
    estimated from a stream's first nodes, whichever is more)."""
    total = 0
    for key in (keys.job_key(job_id), keys.job_lines_key(job_id)):
        counted = [client.memory_usage(key, samples=0), client.memory_usage(key)]
        total += max(int(n or 0) for n in counted)
    return total


def test_a_report_is_bounded_in_bytes_expires_and_jobs_delete_leaves_no_key(
    cli_env: None,  # noqa: F811
    redis_client: redis.Redis,
) -> None:
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    jobs = RedisJobs.of(store, ttl_s=120, max_bytes=16384)
    assert jobs is not None
    jobs.start("big", {"selection": {"all": True}}, 1, "0")
    line = json.dumps({"run_id": "r", "diff": "x" * 1000})
    for chunk in range(50):
        code = jobs.checkpoint(
            "big", 0, before=str(chunk), after=str(chunk + 1), totals={"runs": 10},
            lines=[line] * 10,
        )  # fmt: skip
        assert code == Checkpoint.GOES_ON
    # What the job keeps in Redis (hash and lines, as MEMORY USAGE counts them) is at most the
    # byte bound; the stream holds the newest lines, and the hash says how many went
    kept = redis_client.xrange(keys.job_lines_key("big"))
    job = jobs.get("big")
    assert job is not None
    assert 0 < len(kept) < 500 and kept[-1][1]["l"] == line
    assert 0 < job.report_bytes <= 16384 and kept_in_redis("big", redis_client) <= 16384
    assert job.lines_trimmed == 500 - len(kept)
    # Both keys expire by the setting
    for key in (keys.job_key("big"), keys.job_lines_key("big")):
        assert 0 < redis_client.pttl(key) <= 120_000
    # A running job is not deleted; a finished one goes with all it kept
    refused = invoke("jobs", "delete", "big")
    assert refused.exit_code == EXIT_USAGE and "cancel it first" in refused.output
    assert invoke("jobs", "cancel", "big").exit_code == EXIT_OK
    assert jobs.get("big") is not None and jobs.get("big").state == "cancelled"  # type: ignore[union-attr]
    deleted = invoke("jobs", "delete", "big")
    assert deleted.exit_code == EXIT_OK, deleted.output
    assert redis_client.keys("tb:{jobs}:*big*") == []
    assert redis_client.zscore(keys.JOBS, "big") is None
    assert invoke("jobs", "delete", "big").exit_code == EXIT_NOT_FOUND


def test_ctrl_c_on_a_follower_says_the_job_goes_on_and_how_to_cancel_it(
    cli_env: None,  # noqa: F811
    v1: ToolBoundary,  # noqa: F811
    worker_v2: tuple[Path, dict[str, str]],  # noqa: F811
    celery_settings: Settings,
) -> None:
    # Given a job whose one chunk is held in the projector, followed by a real process
    write_runs(v1, {"held-run": [("c1", "hold", 0.9)]})
    log, env = worker_v2
    command = str(Path(sys.executable).with_name("tool-boundary"))
    cli_process = subprocess.Popen(
        [command, "reproject", "--projectors", "current", "--run", "held-run", "--job", "held"],
        cwd=ROOT,
        env=clean_env() | settings_env(celery_settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # When Ctrl-C comes while the chunk runs (the follower is following it)
        wait_for(lambda: "reproject_chunk[" in log.read_text(errors="replace"))
        cli_process.send_signal(signal.SIGINT)
        _, stderr = cli_process.communicate(timeout=30)
    finally:
        if cli_process.poll() is None:
            cli_process.kill()
            cli_process.wait()
        Path(env[reprojection_tools.HOLD_ENV]).touch()
    # Then it exits 130, saying the job goes on and how to follow or cancel it
    assert cli_process.returncode == EXIT_INTERRUPTED, stderr
    assert "interrupted" in stderr and "job held goes on in the workers" in stderr
    assert "tool-boundary jobs cancel held" in stderr and "Traceback" not in stderr
    # (and it does: the job ends in the workers)
    assert wait_for(lambda: job_state("held")["state"] == "done")


def test_records_of_a_tool_the_workers_lack_are_counted_apart_not_failed(
    v1: ToolBoundary,  # noqa: F811
) -> None:
    write_runs(v1, {"u1": [("c1", "a", 0.9)]})
    report = Reprojector(v1.store, ToolRegistry()).runs(["u1"], Selection(runs=("u1",)))
    got = summary(report.totals)
    assert (got["not_registered"], got["failed"], got["records_changed"]) == (1, 0, 0)
    assert got["versions"] == {TOOL: "v1 -> none"}
    assert got["tools"][TOOL]["not_registered"] == 1
