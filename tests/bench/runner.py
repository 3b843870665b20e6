"""Runs ``python -m bench`` the way the bench tests do, so they share one runner: a subprocess
without the project's ``TOOL_BOUNDARY_*`` settings (the bench names its own DBs), a skip when
another benchmark run holds the bench's DBs locally (a failure under CI), and the JSON document
the bench prints on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CI, REDIS_HOST, REDIS_PORT

ROOT = Path(__file__).resolve().parents[2]
#: The test Redis server, which the bench splits into its own DBs.
SERVER = f"redis://{REDIS_HOST}:{REDIS_PORT}"
#: bench's exit status when another benchmark run holds DBs 3-5 of the same server.
EXIT_BUSY = 75


def run_bench(*args: str, timeout: float) -> dict[str, Any]:
    """The JSON document of ``python -m bench *args`` (which should hold ``--json``).

    Skips locally, fails under CI, when the bench exits busy; fails on any other non-zero exit
    with the end of the bench's stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode == EXIT_BUSY and not CI:
        pytest.skip("another benchmark run holds the benchmark's Redis DBs")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def positive(value: object) -> bool:
    """A positive number (not a bool, which is an int to Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
