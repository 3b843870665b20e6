"""Worker subprocesses: ours (``celery -A tasks worker``), the peers' (``celery -A
bench.peers.bare worker``, ...) and beat, started alike from the settings they are to load
(``settings_env``), each in its own process group, and always stopped, also on Ctrl-C or an
exception. The bench and the tests start theirs here."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from celery import Celery

from tasks.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a worker may take to answer its first ping.
START_TIMEOUT_S = 60.0
#: Seconds a worker may take to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Pool:
    """A worker pool and its concurrency: one point of the B1/B2 grid."""

    name: str
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.name} c={self.concurrency}"


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a worker (ours or a peer's) load ``settings``: this one's,
    without its ``TOOL_BOUNDARY_*`` variables, plus one for each setting, and the project on
    ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"TOOL_BOUNDARY_{name.upper()}"] = str(value)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def celery_command(module: str, *args: str) -> list[str]:
    """``python -m celery -A module args`` with this interpreter."""
    return [sys.executable, "-m", "celery", "-A", module, *args]


def worker_args(
    pool: str,
    concurrency: int,
    queues: Sequence[str],
    *,
    node: str | None = None,
    level: str = "INFO",
    alone: bool = True,
) -> tuple[str, ...]:
    """``worker -P pool -c concurrency -Q queues [-n node] -l level``; ``alone``: without
    mingle and gossip (a worker that starts at once and talks to no other)."""
    return (
        "worker",
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-Q",
        ",".join(queues),
        *(("-n", node) if node else ()),
        "-l",
        level,
        *(("--without-mingle", "--without-gossip") if alone else ()),
    )


def beat_args(schedule: Path, level: str = "WARNING") -> tuple[str, ...]:
    """``beat`` with its schedule file at ``schedule``."""
    return ("beat", "-l", level, "--schedule", str(schedule))


def start_process(
    command: list[str], env: dict[str, str], log: Path, *, cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    """``command`` in ``cwd`` (the project's root) and ``env``, its own process group (its
    pool's children too), its output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_beat(
    env: dict[str, str], schedule: Path, log: Path, level: str = "WARNING"
) -> subprocess.Popen[bytes]:
    """``celery -A tasks beat`` (the reaper's schedule) in ``env``; stop it with
    ``stop_group``."""
    return start_process(celery_command("tasks", *beat_args(schedule, level)), env, log)


def stop_group(proc: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to ``proc``'s process group (a warm shutdown), then SIGKILL when it has not
    ended within ``timeout_s``."""
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def await_log(
    proc: subprocess.Popen[bytes], log: Path, text: str, timeout_s: float, what: str
) -> None:
    """Returns once ``text`` is in ``log``; raises with the log's end when ``proc`` ended or
    ``timeout_s`` passed first."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{what} did not start; its log ends:\n{tail}")
        time.sleep(0.1)


@contextmanager
def celery_process(
    env: dict[str, str],
    *args: str,
    log: Path,
    module: str = "tasks",
    ready_text: str = " ready.",
    timeout_s: float = 30.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Runs ``celery -A module args`` in ``env`` until the block ends; waits for
    ``ready_text`` in its log first."""
    log.write_bytes(b"")
    proc = start_process(celery_command(module, *args), env, log)
    try:
        await_log(proc, log, ready_text, timeout_s, f"celery {args[0]}")
        yield proc
    finally:
        stop_group(proc)


class WorkerProcess:
    """One ``celery worker`` subprocess in its own process group (its pool's children too),
    so it can be stopped whole and its CPU read as a group."""

    def __init__(
        self,
        *,
        module: str,
        name: str,
        app: Celery,
        settings: Settings,
        pool: Pool,
        queues: tuple[str, ...],
        log_dir: Path,
    ) -> None:
        self.name = name
        self.app = app
        self.node = f"{name}-{pool.name}{pool.concurrency}@{socket.gethostname()}"
        self.log = log_dir / f"{name}-{pool.name}{pool.concurrency}.log"
        # INFO would log two lines per task on both sides: not what either side costs.
        args = worker_args(pool.name, pool.concurrency, queues, node=self.node, level="WARNING")
        self.proc = start_process(celery_command(module, *args), settings_env(settings), self.log)

    @property
    def pgid(self) -> int:
        return self.proc.pid

    def await_ready(self) -> None:
        """Returns once the worker answers a ping (it consumes from then on)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.app.control.ping(destination=[self.node], timeout=0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"worker {self.node} did not start; its log ends:\n{tail}")

    def terminate(self) -> None:
        """Asks for a warm shutdown (SIGTERM to the whole group)."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGTERM)

    def stop(self) -> None:
        """Terminates and waits; kills the group if it does not stop in time."""
        stop_group(self.proc)


@contextmanager
def running(*workers: Callable[[], WorkerProcess]) -> Iterator[list[WorkerProcess]]:
    """Starts every worker at once, yields when all answer, stops them all at the end."""
    started: list[WorkerProcess] = []
    try:
        for start in workers:
            started.append(start())
        for process in started:
            process.await_ready()
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.stop()
