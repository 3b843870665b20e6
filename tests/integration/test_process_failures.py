"""Every failure of the CLI, the demo and a worker, as a user meets it: a real subprocess, its
exit code, and one line on stderr (never a traceback, a password or a setting's value).

Most paths need no service at all (a closed port is the point); the ones that need a live
Redis skip without it locally and fail under ``CI``, like the rest of the suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tasks.exits import EXIT_INTERRUPTED, EXIT_UNAVAILABLE, EXIT_USAGE
from tests.celery.workers import ROOT, run_stopping_worker, settings_env
from tests.conftest import STORE_DB, SUBPROCESS_BROKER_DB, celery_test_settings, redis_url

#: A closed port, with a password that must never be printed.
CLOSED_URL = "redis://:hunter2-pw@127.0.0.1:1/0"
#: Seconds any of these failures may take (generous: a loaded 2-core machine).
PROCESS_TIMEOUT_S = 120


def clean_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    env["PYTHONPATH"] = str(ROOT)
    # No terminal here: rich would pick 80 columns anyway; say so, as a user's terminal would.
    env["COLUMNS"] = "80"
    return env | variables


def tool_boundary(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The console script, as installed (not ``python -m``): what a user runs."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("tool-boundary")), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], code: int, *expected: str) -> str:
    assert done.returncode == code, (done.returncode, done.stderr[-3000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    line = lines[0]
    assert line.startswith("error: "), line
    for part in expected:
        assert part in line, line
    everything = done.stdout + done.stderr
    assert "Traceback" not in everything
    assert "hunter2" not in everything
    return line


# --- an unreachable service: one line, exit 3 -----------------------------------------------

COMMANDS = [
    ["runs"],
    ["show", "run-1", "call-1"],
    ["observe", "run-1"],
    ["reproject", "--run", "run-1"],
    ["demo"],
    ["demo", "--json"],
    ["demo", "--no-worker"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_closed_store_port_is_one_line_and_exit_3(args: list[str]) -> None:
    done = tool_boundary(clean_env(TOOL_BOUNDARY_REDIS_URL=CLOSED_URL), *args)

    assert_one_line(done, EXIT_UNAVAILABLE, "the store at 127.0.0.1:1/0 is unreachable")


@pytest.mark.parametrize("part", ["BROKER_URL", "RESULT_BACKEND"])
def test_the_demo_with_a_closed_broker_or_backend_is_one_line_and_exit_3(
    part: str, redis_client: redis.Redis
) -> None:
    env = clean_env(TOOL_BOUNDARY_REDIS_URL=redis_url(STORE_DB))
    env[f"TOOL_BOUNDARY_{part}"] = CLOSED_URL

    done = tool_boundary(env, "demo")

    name = "broker" if part == "BROKER_URL" else "result backend"
    assert_one_line(done, EXIT_UNAVAILABLE, f"the {name} at 127.0.0.1:1/0 is unreachable")


def test_demo_no_worker_without_workers_fails_fast_with_a_hint(
    redis_client: redis.Redis,
) -> None:
    # Given a reachable Redis and no worker consuming the call queues
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), tools="tasks.demo.tools:registry"
    )
    env = clean_env() | settings_env(settings)

    # When the demo is told to use external workers
    started = time.monotonic()
    done = tool_boundary(env, "demo", "--no-worker")

    # Then it says so before the first call (not after a 30 s wait per call)
    assert_one_line(
        done, EXIT_UNAVAILABLE, "no worker consumes tools, projections", "celery -A tasks worker"
    )
    assert "call_" not in done.stdout
    assert time.monotonic() - started < PROCESS_TIMEOUT_S


# --- a bad setting: one line naming it (never its value), exit 2 ----------------------------

BAD_SETTINGS = [
    ("TOOL_BOUNDARY_TTL_S", "abc"),
    ("TOOL_BOUNDARY_TTL_S", "-5"),
    ("TOOL_BOUNDARY_MAX_RAW_BYTES", "lots-s3cret"),
]


@pytest.mark.parametrize(("name", "value"), BAD_SETTINGS)
@pytest.mark.parametrize("args", [["runs"], ["demo"], ["demo", "--json"]], ids=" ".join)
def test_a_bad_setting_is_one_line_and_exit_2(name: str, value: str, args: list[str]) -> None:
    done = tool_boundary(clean_env(**{name: value}), *args)

    line = assert_one_line(done, EXIT_USAGE, f"invalid settings: {name}")
    assert value not in line


@pytest.mark.parametrize(("name", "value"), BAD_SETTINGS[:2])
def test_a_worker_with_a_bad_setting_stops_with_one_line_and_exit_2(name: str, value: str) -> None:
    done = run_stopping_worker(clean_env(**{name: value}))

    assert done.returncode == EXIT_USAGE, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if "tool-boundary" in line]
    assert ours == [f"error: tool-boundary: invalid settings: {name}"], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert value not in done.stderr


def test_a_worker_that_cannot_load_its_tools_stops_with_one_line_and_exit_2() -> None:
    done = run_stopping_worker(
        clean_env(TOOL_BOUNDARY_REDIS_URL=CLOSED_URL, TOOL_BOUNDARY_TOOLS="no_such_module:registry")
    )

    assert done.returncode == EXIT_USAGE, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if "tool-boundary" in line]
    assert len(ours) == 1 and "cannot load tools from 'no_such_module:registry'" in ours[0]
    assert "Traceback" not in done.stderr
    assert "hunter2" not in done.stderr


# --- Ctrl-C: no traceback, exit 130 ---------------------------------------------------------


def test_ctrl_c_in_the_demo_prints_no_traceback_and_exits_130() -> None:
    # Given the embedded demo, started and showing its run
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("tool-boundary")), "demo"],
        cwd=ROOT,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("Run demo-"):
                break

        # When the user presses Ctrl-C
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # Then it ends with one line and 130 (or, had the run just finished, normally)
    assert proc.returncode in (EXIT_INTERRUPTED, 0), stderr[-3000:]
    if proc.returncode == EXIT_INTERRUPTED:
        assert stderr.strip() == "interrupted"
    assert "Traceback" not in stdout + stderr
