"""The system under test: its redis-servers, a threads worker, a prefork worker and beat, each
in a process group of its own, and a supervisor that starts again any of them that exits.

An exit the chaos run caused (it killed the worker) is planned; any other exit is counted as
unplanned, with the last lines of the process's log kept for the report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.rig.sentinel import SentinelSet
from bench.rig.servers import PortRange, RedisServer, named
from bench.rig.workers import (
    beat_args,
    celery_command,
    settings_env,
    start_process,
    worker_args,
)
from bench.studies.chaos.tools import LEDGER_ENV
from tasks.settings import Settings

#: Seconds between two looks of the supervisor.
SUPERVISE_EVERY_S = 0.5
#: Seconds a worker may take to log that it is ready.
READY_TIMEOUT_S = 90.0


@dataclass
class Program:
    """One supervised process: a worker or beat."""

    name: str
    command: list[str]
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    #: Set by the chaos run just before it kills the process: that exit is planned.
    planned_exit: bool = False
    starts: int = 0
    unplanned_exits: list[str] = field(default_factory=list)

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.starts + 1} ===\n".encode())
        self.proc = start_process(self.command, self.env, self.log)
        self.starts += 1
        self.planned_exit = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL to the whole process group (a prefork worker's children too)."""
        self.planned_exit = True
        with suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)

    def children(self) -> list[int]:
        """The pids of the process's children (a prefork worker's pool processes)."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        try:
            return [int(pid) for pid in path.read_text().split()]
        except OSError:
            return []

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.planned_exit = True
        with suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.proc.wait()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def worker_command(name: str, pool: str, concurrency: int) -> list[str]:
    """As the Procfile starts one (mingle and gossip on), on every queue of the chaos tools."""
    queues = ("tools", "projections", "long")
    args = worker_args(pool, concurrency, queues, node=f"{name}@%h", alone=False)
    return celery_command("tasks", *args)


class Fleet:
    """The chaos run's servers and programs."""

    def __init__(
        self, directory: Path, ports: PortRange, *, sentinel: bool, min_replicas: int = 0
    ) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ledger = named(ports, "ledger", directory / "ledger", appendonly=False)
        self.ledger.start()
        self.broker = named(ports, "broker", directory / "broker", appendonly=True)
        self.broker.start()
        self.sentinel: SentinelSet | None = None
        self.store: RedisServer | None = None
        if sentinel:
            self.sentinel = SentinelSet(directory / "sentinel", ports, min_replicas=min_replicas)
            store_url, backend_url = self.sentinel.url(0), self.sentinel.url(1)
        else:
            self.store = named(ports, "store", directory / "store", appendonly=True)
            self.store.start()
            store_url, backend_url = self.store.db_url(0), self.store.db_url(1)
        self.settings = Settings(
            redis_url=store_url,
            broker_url=self.broker.db_url(0),
            result_backend=backend_url,
            tools="bench.studies.chaos.tools:registry",
            ttl_s=7200,
            max_pending_s=20,
            reap_grace_s=2,
            reap_interval_s=2,
            visibility_timeout_s=60,
            restore_sweep_s=5,
            task_time_limit_s=120,
            redis_wait_replicas=1 if sentinel else 0,
        )
        env = settings_env(self.settings) | {LEDGER_ENV: self.ledger.db_url(0)}
        logs = directory / "logs"
        logs.mkdir(exist_ok=True)
        beat = celery_command("tasks", *beat_args(directory / "beat-schedule", level="INFO"))
        self.workers = [
            Program("threads", worker_command("threads", "threads", 8), logs / "threads.log", env),
            Program("prefork", worker_command("prefork", "prefork", 3), logs / "prefork.log", env),
        ]
        self.beat = Program("beat", beat, logs / "beat.log", env)
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None

    @property
    def programs(self) -> list[Program]:
        return [*self.workers, self.beat]

    def data_servers(self) -> list[RedisServer]:
        """The servers faults may hit (never the ledger)."""
        servers = [self.broker]
        if self.store is not None:
            servers.append(self.store)
        if self.sentinel is not None:
            servers += self.sentinel.servers
        return servers

    def store_admin(self) -> Callable[[int], redis.Redis]:
        """Clients of the store's server (the master now, under Sentinel), by DB."""
        server = self.sentinel.master() if self.sentinel is not None else self.store
        assert server is not None
        return lambda db: server.client(db=db)

    def whole(self) -> bool:
        """Every server running and answering (the faults leave it so; checked at the end)."""
        for server in (self.broker, self.store):
            if server is not None and (not server.running or server.paused):
                return False
        return self.sentinel is None or self.sentinel.healthy()

    def start(self) -> None:
        for program in self.programs:
            program.start()
        give_up = time.monotonic() + READY_TIMEOUT_S
        for worker in self.workers:
            while " ready." not in worker.log.read_text(errors="replace"):
                if time.monotonic() > give_up or worker.proc is None or worker.proc.poll():
                    raise RuntimeError(f"worker {worker.name} did not start:\n{worker.tail()}")
                time.sleep(0.2)
        self._supervisor = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._supervisor.start()

    def _supervise(self) -> None:
        while not self._stop.wait(SUPERVISE_EVERY_S):
            for program in self.programs:
                if program.proc is None or program.proc.poll() is None:
                    continue
                if not program.planned_exit:
                    code = program.proc.returncode
                    program.unplanned_exits.append(f"exit {code}:\n{program.tail()}")
                program.start()

    def stop(self) -> None:
        self._stop.set()
        if self._supervisor is not None:
            self._supervisor.join()
        for program in self.programs:
            program.stop()
        for server in self.data_servers():
            server.resume()
        if self.sentinel is not None:
            self.sentinel.stop()
        for server in (self.broker, self.store, self.ledger):
            if server is not None:
                server.stop()
