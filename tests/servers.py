"""Redis servers a test starts, pauses, restarts and stops itself (own ports, own data dirs).

Ports come from ``TB_TEST_SERVER_PORTS`` (``first-last``, default 21200-21299), so parallel
suites on one machine keep apart; a port in use is skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

#: Under CI (``CI`` set) a missing service fails instead of skipping. Defined here, not in
#: ``tests.conftest`` (which takes it from here): the root conftest starts an xdist worker's
#: own server with these helpers before it is itself imported.
CI = bool(os.environ.get("CI"))

_PORTS = os.environ.get("TB_TEST_SERVER_PORTS", "21200-21299")
_FIRST, _LAST = (int(p) for p in _PORTS.split("-"))
_taken: set[int] = set()
_taken_lock = threading.Lock()


def redis_server_binary() -> str:
    """The ``redis-server`` path; skips locally, fails under CI, when there is none."""
    found = shutil.which("redis-server")
    if found is None:
        if CI:
            raise RuntimeError("redis-server is not installed")
        pytest.skip("redis-server is not installed")
    return found


def release_port(port: int) -> None:
    """Gives a port taken by ``free_port`` back, once its server has stopped."""
    with _taken_lock:
        _taken.discard(port)


def free_port() -> int:
    """A port of our range that nothing listens on (and no other server of this run took)."""
    with _taken_lock:
        for port in range(_FIRST, _LAST + 1):
            if port in _taken:
                continue
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            # The cluster bus listens on port + 10000: keep that free too.
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            _taken.add(port)
            return port
    raise RuntimeError(f"no free port in {_PORTS}")


def _die_with_parent() -> None:
    """In the child before ``exec``: SIGTERM when the parent thread ends (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class RedisServer:
    """One ``redis-server`` process of the test's own."""

    def __init__(
        self,
        directory: Path,
        *args: str,
        password: str | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.port = free_port()
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.password = password
        #: The kernel ends the server (SIGTERM) when the thread that started it ends, even when
        #: that process is killed and cannot stop it (Linux' PR_SET_PDEATHSIG).
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password, decode_responses=True, **options)

    def start(self) -> RedisServer:
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
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            # (only for a server started before any thread: the xdist worker's own)
            preexec_fn=_die_with_parent if self.die_with_parent else None,  # noqa: PLW1509
        )
        give_up = time.monotonic() + 20
        while True:
            try:
                if self.client(socket_timeout=1).ping():
                    return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"redis-server on {self.port} did not start")
            time.sleep(0.05)

    def pause(self) -> None:
        """SIGSTOP: it still accepts connections (the kernel does) but answers nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self, sig: int = signal.SIGTERM) -> None:
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

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def redis_server(directory: Path, *args: str, password: str | None = None) -> Iterator[RedisServer]:
    server = RedisServer(directory, *args, password=password)
    try:
        yield server.start()
    finally:
        server.stop()
        release_port(server.port)


@contextmanager
def redis_cluster(
    directory: Path, nodes: int = 3, replicas: int = 0, *extra: str
) -> Iterator[list[RedisServer]]:
    """A Redis Cluster of ``nodes`` masters of the test's own (``--cluster-enabled yes``, slots
    assigned by ``redis-cli --cluster create``), each with ``replicas`` replicas (``extra``:
    more server options); yields its servers once the state is ok."""
    cli = shutil.which("redis-cli")
    if cli is None:
        if CI:
            raise RuntimeError("redis-cli is not installed")
        pytest.skip("redis-cli is not installed")
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
                    raise RuntimeError("the test cluster did not reach cluster_state:ok")
                time.sleep(0.1)
        yield servers
    finally:
        for server in servers:
            server.stop()
            release_port(server.port)
