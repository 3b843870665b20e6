"""Real ``celery worker`` subprocesses for the tests that need a process to kill or another
broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tasks.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a worker load ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"TOOL_BOUNDARY_{name.upper()}"] = str(value)
    env["PYTHONPATH"] = str(ROOT)
    return env


#: Longest a worker that is expected to stop by itself (at start) may run, seconds.
STOPPING_WORKER_TIMEOUT_S = 120


def run_stopping_worker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``celery -A tasks worker -Q tools`` (plus ``args``) in ``env`` to its end: for a
    worker that must stop at start (bad settings, unreachable services)."""
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-Q", "tools", *args],
        cwd=ROOT,
        env=env | {"C_FORCE_ROOT": "1"},
        capture_output=True,
        text=True,
        timeout=STOPPING_WORKER_TIMEOUT_S,
        check=False,
    )


@contextmanager
def celery_process(
    settings: Settings,
    *args: str,
    ready_text: str = " ready.",
    log: Path,
    timeout_s: float = 30.0,
    extra_env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Runs ``celery -A tasks <args>`` until the block ends; waits for ``ready_text`` in its log."""
    env = settings_env(settings) | (extra_env or {})
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while ready_text not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"celery {args[0]} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


def worker_args(name: str, pool: str = "threads", concurrency: int = 4) -> tuple[str, ...]:
    return (
        "worker",
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-Q",
        "tools,projections",
        "-n",
        f"{name}@%h",
        "-l",
        "INFO",
        "--without-mingle",
        "--without-gossip",
    )
