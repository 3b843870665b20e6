"""Worker subprocesses: ours (``celery -A tasks worker``) and bare (``celery -A bench.peers.bare
worker``), started alike and always stopped, also on Ctrl-C or an exception."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from celery import Celery

from bench.suite.config import Pool
from tasks.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a worker may take to answer its first ping.
START_TIMEOUT_S = 60.0
#: Seconds a worker may take to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 15.0


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a worker (ours or bare) load ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"TOOL_BOUNDARY_{name.upper()}"] = str(value)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def worker_command(module: str, node: str, pool: Pool, queues: tuple[str, ...]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        module,
        "worker",
        "-P",
        pool.name,
        "-c",
        str(pool.concurrency),
        "-Q",
        ",".join(queues),
        "-n",
        node,
        # INFO would log two lines per task on both sides: not what either side costs.
        "-l",
        "WARNING",
        "--without-mingle",
        "--without-gossip",
    ]


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
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log = log_dir / f"{name}-{pool.name}{pool.concurrency}.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                worker_command(module, self.node, pool, queues),
                cwd=ROOT,
                env=settings_env(settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

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
        self.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)
            self.proc.wait()


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
