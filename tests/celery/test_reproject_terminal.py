"""``tool-boundary reproject`` as a person sees it on a terminal (a pseudo-terminal, against a
real worker process): progress as ``N of TOTAL runs``, then a table per tool (records,
changed, flips, failed by type, versions ``v1 -> v2``) and the first evidence flips, and no
JSON line; with stdout a pipe, stdout holds JSON lines only (the summary goes to stderr)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from boundary import ToolBoundary
from tasks.exits import EXIT_PROJECTIONS_FAILED
from tasks.settings import Settings
from tests.celery.test_reproject_jobs import (
    cli_env,  # noqa: F401 (a fixture)
    v1,  # noqa: F401 (a fixture)
    worker_v2,  # noqa: F401 (a fixture)
    write_runs,
)
from tests.celery.workers import ROOT, settings_env
from tests.integration.test_process_failures import clean_env
from tests.support import reprojection_tools
from tests.support.helpers import wait_until
from tests.support.reprojection_tools import SECRET

COMMAND = str(Path(sys.executable).with_name("tool-boundary"))
#: The terminal's size, columns and rows.
COLUMNS, ROWS = 120, 40
#: Longest the test waits for any one stage, seconds (a give-up, never an assertion on time).
GIVE_UP_S = 90.0
#: A terminal's escape sequences (colours, cursor moves).
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

RUNS: dict[str, list[tuple[str, str, float]]] = {
    # r1: a changed result, an evidence flip, a projector that raises; r2: a record whose
    # projector waits for a file (so the follower shows its progress while it waits)
    "t1": [("c1", "a", 0.9), ("c2", "b", 0.2), ("c3", "boom", 0.9)],
    "t2": [("c1", "hold", 0.9)],
}


def cli_environment(settings: Settings) -> dict[str, str]:
    env = clean_env() | settings_env(settings)
    env.pop("COLUMNS", None)  # the terminal's own size
    env.pop("NO_COLOR", None)
    return env | {
        "TOOL_BOUNDARY_TOOLS": "tests.support.reprojection_tools:registry",
        reprojection_tools.VERSION_ENV: "2",
        "TERM": "xterm-256color",
    }


class Terminal:
    """What a process wrote to its pseudo-terminal, as text without escape sequences."""

    def __init__(self, master: int) -> None:
        self._master = master
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 4096)
            except OSError:  # EIO: the process closed its end
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    def text(self) -> str:
        raw = b"".join(self._chunks).decode(errors="replace")
        return ESCAPES.sub("", raw).replace("\r\n", "\n").replace("\r", "\n")

    def close(self) -> None:
        self._reader.join(timeout=10)
        os.close(self._master)


@contextmanager
def on_a_terminal(
    env: dict[str, str], *args: str
) -> Iterator[tuple[subprocess.Popen[bytes], Terminal]]:
    """Runs ``tool-boundary ARGS`` with stdin, stdout and stderr on a pseudo-terminal of
    ``COLUMNS`` x ``ROWS``."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    process = subprocess.Popen(
        [COMMAND, *args], cwd=ROOT, env=env, stdin=slave, stdout=slave, stderr=slave,
        start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    terminal = Terminal(master)
    try:
        yield process, terminal
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        terminal.close()


def test_on_a_terminal_a_person_sees_progress_a_table_per_tool_and_the_flips(
    cli_env: None,  # noqa: F811
    v1: ToolBoundary,  # noqa: F811
    worker_v2: tuple[Path, dict[str, str]],  # noqa: F811
    celery_settings: Settings,
    redis_client: redis.Redis,
) -> None:
    # Given runs sealed by version 1 of a projector, and a worker with version 2
    write_runs(v1, RUNS)
    _, worker = worker_v2
    env = cli_environment(celery_settings)
    held = Path(worker[reprojection_tools.HOLD_ENV])
    command = ["reproject", "--projectors", "current", "--run", "t1", "--run", "t2"]

    # When a person runs the dry run on a terminal, a run per chunk
    with on_a_terminal(env, *command, "--chunk-size", "1", "--lanes", "1", "--job", "tty") as (
        process,
        terminal,
    ):
        # Then while the second run's projector waits, the progress says how far it is
        wait_until(lambda: "1 of 2 runs" in terminal.text(), "the progress", GIVE_UP_S)
        held.touch()
        code = process.wait(timeout=GIVE_UP_S)
    seen = terminal.text()
    lines = seen.splitlines()
    assert "job tty started: 2 runs" in seen
    assert "reprocessing: 1 of 2 runs (50%)" in seen
    # And it ends with a table per tool: records, changed, flips, failed by type, versions
    assert code == EXIT_PROJECTIONS_FAILED, seen
    header = next(line for line in lines if "records changed" in line)
    assert [cell.strip() for cell in header.strip("┃│ ").split("┃")] == [
        "tool", "records", "records changed", "evidence flips", "failed", "versions",
    ]  # fmt: skip
    row = next(line for line in lines if line.startswith("│ lookup "))
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == [
        "lookup", "4", "4", "EVIDENCE_FOUND -> NO_EVIDENCE 1", "RuntimeError 1", "v1 -> v2",
    ]  # fmt: skip
    # And the first flips, one line each, and why it exits 5
    assert "evidence flips: 1" in lines
    assert "t1/c2: EVIDENCE_FOUND -> NO_EVIDENCE" in lines
    assert "error: 1 projection(s) failed (lookup: RuntimeError 1)" in seen
    # And no JSON line, no line wider than the terminal, nothing raw
    assert not [line for line in lines if line.lstrip().startswith("{")]
    assert max(len(line) for line in lines) <= COLUMNS
    assert SECRET not in seen and "Traceback" not in seen

    # When its output goes to a pipe
    piped = subprocess.run(
        [COMMAND, *command, "--job", "piped"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=GIVE_UP_S, check=False,
    )  # fmt: skip
    # Then stdout is JSON lines, one per run; the summary goes to stderr
    assert piped.returncode == EXIT_PROJECTIONS_FAILED, piped.stderr
    out = [json.loads(line) for line in piped.stdout.splitlines()]
    assert sorted(line["run_id"] for line in out) == ["t1", "t2"]
    assert "v1 -> v2" in piped.stderr and "v1 -> v2" not in piped.stdout


def test_on_a_terminal_a_paced_job_says_when_its_next_chunk_starts(
    cli_env: None,  # noqa: F811
    v1: ToolBoundary,  # noqa: F811
    worker_v2: tuple[Path, dict[str, str]],  # noqa: F811
    celery_settings: Settings,
) -> None:
    # Given two runs of one record each, re-projected a run per chunk at 1 record per 20 s
    write_runs(v1, {"p1": [("c1", "a", 0.9)], "p2": [("c1", "b", 0.9)]})
    command = [
        "reproject", "--projectors", "current", "--run", "p1", "--run", "p2",
        "--chunk-size", "1", "--lanes", "1", "--rate", "1/20", "--job", "paced",
    ]  # fmt: skip
    # When a person follows it on a terminal
    with on_a_terminal(cli_environment(celery_settings), *command) as (process, terminal):
        # Then while the lane waits for its next chunk, the progress says when it starts
        paced = re.compile(
            r"1 of 2 runs \(50%\).*; paced by --rate 1/20: next chunk at about "
            r"\d\d:\d\d:\d\d UTC"
        )
        wait_until(lambda: paced.search(terminal.text()), "the paced progress", GIVE_UP_S)
        code = process.wait(timeout=GIVE_UP_S)
    # And the job ends as usual
    assert code == 0, terminal.text()
    assert "by tool" in terminal.text()
