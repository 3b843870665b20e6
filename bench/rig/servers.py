"""redis-server processes of our own: started, killed, paused and restarted on the same port,
each with its own data directory (so a restart with AOF finds its file), and a Redis Cluster
of them. The bench's studies and the tests start theirs here.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

#: Seconds a redis-server may take to answer its first PING.
START_TIMEOUT_S = 30.0
#: Seconds a redis-server may take to stop before it is killed.
STOP_TIMEOUT_S = 20.0
#: A Cluster node's bus listens on its port plus this.
BUS_OFFSET = 10000


class Missing(RuntimeError):
    """A program the rig runs (``redis-server``, ``redis-cli``) is not installed."""


def program(name: str) -> str:
    """The path of ``name``; ``Missing`` when there is none."""
    found = shutil.which(name)
    if found is None:
        raise Missing(f"{name} is not installed")
    return found


def redis_server_binary() -> str:
    return program("redis-server")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PortRange:
    """Ports our servers may listen on: a port in use, or taken and not released, is skipped.
    ``bus``: the port plus ``BUS_OFFSET`` must be free too (a Cluster node listens there)."""

    def __init__(self, first: int, last: int, *, bus: bool = False) -> None:
        #: A range is scanned from its start on each take; an iterator (``of``) goes on.
        self.ports: Iterable[int] = range(first, last + 1)
        self.bus = bus
        self._taken: set[int] = set()
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, text: str, *, bus: bool = False) -> PortRange:
        """From ``first-last``."""
        first, last = (int(part) for part in text.split("-"))
        return cls(first, last, bus=bus)

    @classmethod
    def of(cls, ports: Iterable[int]) -> PortRange:
        """Ports from ``ports``, taken as needed (a test hands out its own)."""
        taken = cls(0, -1)
        taken.ports = iter(ports)
        return taken

    def take(self) -> int:
        with self._lock:
            for port in self.ports:
                if port in self._taken or not _free(port):
                    continue
                if self.bus and not _free(port + BUS_OFFSET):
                    continue
                self._taken.add(port)
                return port
        raise RuntimeError(f"no free port left in {self.ports}")

    def release(self, port: int) -> None:
        """Gives a port back, once its server has stopped."""
        with self._lock:
            self._taken.discard(port)


def aof(on: bool) -> tuple[str, ...]:
    """The options of a server with (or without) an append-only file, fsynced every second."""
    return ("--appendonly", "yes" if on else "no", "--appendfsync", "everysec")


def named(ports: PortRange, name: str, directory: Path, *, appendonly: bool) -> RedisServer:
    """A server called ``name`` on a port of ``ports``, with or without an append-only file,
    whose clients give up on a reply after 5 s (not yet started)."""
    return RedisServer(
        directory, *aof(appendonly), port=ports.take(), name=name, client_timeout_s=5
    )


def _die_with_parent() -> None:
    """In the child before ``exec``: SIGTERM when the parent thread ends (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class RedisServer:
    """One ``redis-server`` on a fixed port (``args``: more server options); ``kill`` then
    ``start`` brings it back there. Without an append-only file a SIGKILL loses the data (the
    restarted server is empty, as a broker or store without persistence would be)."""

    def __init__(
        self,
        directory: Path,
        *args: str,
        port: int,
        name: str = "redis",
        password: str | None = None,
        die_with_parent: bool = False,
        client_timeout_s: float | None = None,
    ) -> None:
        self.name = name
        self.port = port
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.password = password
        #: The kernel ends the server (SIGTERM) when the thread that started it ends, even when
        #: that process is killed and cannot stop it (Linux' PR_SET_PDEATHSIG).
        self.die_with_parent = die_with_parent
        #: ``client()``'s socket timeout unless given.
        self.client_timeout_s = client_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def url(self) -> str:
        return self.db_url(0)

    def db_url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, **options: object) -> redis.Redis:
        options.setdefault("socket_timeout", self.client_timeout_s)
        return redis.Redis(
            port=self.port,
            password=self.password,
            decode_responses=True,
            **options,  # type: ignore[arg-type]
        )

    def command(self) -> list[str]:
        command = [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--logfile",
            str(self.directory / "redis.log"),
            *self.args,
        ]
        if self.password is not None:
            command += ["--requirepass", self.password]
        return command

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            # (only for a server started before any thread: the xdist worker's own)
            preexec_fn=_die_with_parent if self.die_with_parent else None,  # noqa: PLW1509
        )
        self.paused = False
        give_up = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if self.client(socket_timeout=1).ping():
                    return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"redis-server {self.name} on {self.port} did not start")
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

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

    def kill(self) -> None:
        """SIGKILL: whatever was not written to the AOF (or all of it, without) is gone."""
        self.stop(signal.SIGKILL)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.paused = False

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def redis_cluster(
    directory: Path, ports: PortRange, nodes: int = 3, replicas: int = 0, *extra: str
) -> Iterator[list[RedisServer]]:
    """A Redis Cluster of ``nodes`` masters (``--cluster-enabled yes``, slots assigned by
    ``redis-cli --cluster create``), each with ``replicas`` replicas (``extra``: more server
    options); yields its servers once the state is ok. ``ports`` should keep the bus free."""
    cli = program("redis-cli")
    servers = [
        RedisServer(
            directory / f"node{n}",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--appendonly",
            "no",
            *extra,
            port=ports.take(),
        )
        for n in range(nodes * (1 + replicas))
    ]
    try:
        for server in servers:
            server.start()
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{s.port}" for s in servers),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        give_up = time.monotonic() + 30
        for server in servers:
            while server.client().execute_command("CLUSTER INFO").get("cluster_state") != "ok":
                if time.monotonic() > give_up:
                    raise RuntimeError("the cluster did not reach cluster_state:ok")
                time.sleep(0.1)
        yield servers
    finally:
        for server in servers:
            server.stop()
            ports.release(server.port)
