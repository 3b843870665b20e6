"""Real ``celery worker`` subprocesses for the tests that need a process to kill or another
broker: the rig's (``bench.rig.workers``), with the tests' defaults."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.rig import workers as rig
from bench.rig.workers import ROOT, settings_env
from tasks.settings import Settings

__all__ = ["ROOT", "celery_process", "run_stopping_worker", "settings_env", "worker_args"]

#: Longest a worker that is expected to stop by itself (at start) may run, seconds.
STOPPING_WORKER_TIMEOUT_S = 120


def run_stopping_worker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``celery -A tasks worker -Q tools`` (plus ``args``) in ``env`` to its end: for a
    worker that must stop at start (bad settings, unreachable services)."""
    return subprocess.run(
        rig.celery_command("tasks", "worker", "-Q", "tools", *args),
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
    with rig.celery_process(
        env, *args, log=log, ready_text=ready_text, timeout_s=timeout_s
    ) as proc:
        yield proc


def worker_args(name: str, pool: str = "threads", concurrency: int = 4) -> tuple[str, ...]:
    return rig.worker_args(pool, concurrency, ("tools", "projections"), node=f"{name}@%h")
