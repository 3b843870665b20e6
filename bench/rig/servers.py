"""redis-server processes the chaos run owns: started, killed, paused and restarted on the
same port, each with its own data directory (so a restart with AOF finds its file)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import redis

#: Seconds a redis-server may take to answer its first PING.
START_TIMEOUT_S = 30.0


class PortRange:
    """Ports the chaos run may listen on (``first``-``last``); a port in use is skipped."""

    def __init__(self, first: int, last: int) -> None:
        self._next: Iterator[int] = iter(range(first, last + 1))

    @classmethod
    def of(cls, ports: Iterable[int]) -> PortRange:
        """Ports from ``ports``, taken as needed (a test hands out its own)."""
        taken = cls(0, -1)
        taken._next = iter(ports)
        return taken

    def take(self) -> int:
        for port in self._next:
            if _free(port):
                return port
        raise RuntimeError("no free port left in the chaos run's range")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("redis-server is not installed")
    return found


class RedisProcess:
    """One ``redis-server`` on a fixed port; ``kill`` then ``start`` brings it back there.

    ``appendonly`` decides whether a SIGKILL loses the data (no AOF: the restarted server is
    empty, as a broker or store without persistence would be).
    """

    def __init__(
        self,
        name: str,
        port: int,
        directory: Path,
        *,
        appendonly: bool,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.port = port
        self.directory = directory
        self.appendonly = appendonly
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, **options: object) -> redis.Redis:
        options.setdefault("socket_timeout", 5)
        return redis.Redis(port=self.port, decode_responses=True, **options)  # type: ignore[arg-type]

    def command(self) -> list[str]:
        return [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--logfile",
            str(self.directory / "redis.log"),
            *self.extra,
        ]

    def start(self) -> RedisProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        self.paused = False
        give_up = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if self.client(socket_timeout=1).ping():
                    return self
            except redis.BusyLoadingError:
                pass
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"redis-server {self.name} on {self.port} did not start")
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: whatever was not written to the AOF (or all of it, without) is gone."""
        self._signal_and_wait(signal.SIGKILL)

    def stop(self) -> None:
        self._signal_and_wait(signal.SIGTERM)

    def pause(self) -> None:
        """SIGSTOP: the kernel still accepts connections, the server answers nothing."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def _signal_and_wait(self, sig: int) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.paused = False
