"""A Redis password with reserved characters is never printed: not by the CLI (stdout or
stderr), not by a worker's log, whether the URL is written right (percent-encoded) or wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from bench.rig.workers import celery_command
from tests.support.helpers import wait_until
from tests.support.servers import RedisServer, redis_server

ROOT = Path(__file__).resolve().parents[2]
#: A password holding every character that splits a URL, around pieces easy to look for.
PASSWORD = "pwA/pwB#pwC?pwD@pwE:pwF%pwG"
WORKER_ARGS = ("worker", "-P", "threads", "-c", "2", "-Q", "tools,projections", "-l", "DEBUG")
WORKER_ARGS += ("--without-mingle", "--without-gossip", "-n")
PIECES = ("pwA", "pwB", "pwC", "pwD", "pwE", "pwF", "pwG")


def _urls(port: int) -> list[tuple[str, bool]]:
    """(URL, written right?)"""
    return [
        (f"redis://:{PASSWORD}@127.0.0.1:{port}/0", False),  # as an operator might paste it
        (f"redis://user:{PASSWORD}@127.0.0.1:{port}/0", False),
        (f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/0", True),  # percent-encoded
    ]


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    env |= {"TOOL_BOUNDARY_REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    env["TOOL_BOUNDARY_TOOLS"] = "tests.support.celery_tools:registry"
    return env


def _assert_no_piece(text: str) -> None:
    leaked = [piece for piece in PIECES if piece in text]
    assert not leaked, f"password pieces printed: {leaked}\n{text[-2000:]}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> RedisServer:
    with redis_server(tmp_path_factory.mktemp("secured"), password=PASSWORD) as server:
        yield server  # type: ignore[misc]


@pytest.mark.parametrize("command", [["runs"], ["runs", "--json"], ["observe", "run-1"]])
def test_the_cli_never_prints_the_password(secured: RedisServer, command: list[str]) -> None:
    script = Path(sys.executable).with_name("tool-boundary")
    for url, encoded in _urls(secured.port) + _urls(1):  # reachable and unreachable
        done = subprocess.run(
            [str(script), *command],
            check=False,
            capture_output=True,
            text=True,
            env=_env(url),
            timeout=60,
        )
        _assert_no_piece(done.stdout + done.stderr)
        assert "Traceback" not in done.stderr
        if not encoded:
            # Unencoded: refused as a setting, in one line
            assert done.returncode == 2, done.stderr
            assert done.stderr.count("\n") == 1
            assert "TOOL_BOUNDARY_REDIS_URL" in done.stderr


@pytest.mark.slow
def test_a_worker_never_logs_the_password(secured: RedisServer, tmp_path: Path) -> None:
    for n, (url, encoded) in enumerate(_urls(secured.port)):
        log = tmp_path / f"worker{n}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                celery_command("tasks", *WORKER_ARGS, f"secret{n}@%h"),
                cwd=ROOT,
                env=_env(url),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            if encoded:
                # Encoded: the worker starts and works, and its log holds no piece
                _wait_for(log, " ready.", proc)
            else:
                # Unencoded: the worker refuses to start, with one line naming the variable
                assert proc.wait(timeout=60) != 0
                assert "TOOL_BOUNDARY_REDIS_URL" in log.read_text()
                assert "Traceback" not in log.read_text()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        _assert_no_piece(log.read_text(errors="replace"))


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    def logged() -> bool:
        assert proc.poll() is None, log.read_text()
        return text in log.read_text(errors="replace")

    wait_until(logged, f"{text!r} in the log", 60, every=0.2)
