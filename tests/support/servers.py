"""Redis servers a test starts, pauses, restarts and stops itself (own ports, own data dirs):
the rig's (``bench.rig.servers``), on the suite's ports, skipped when redis-server is missing.

Ports come from ``TB_TEST_SERVER_PORTS`` (``first-last``, default 21200-21299), so parallel
suites on one machine keep apart; a port in use is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.rig import servers as rig

#: Under CI (``CI`` set) a missing service fails instead of skipping. Defined here, not in
#: ``tests.conftest`` (which takes it from here): the root conftest starts an xdist worker's
#: own server with these helpers before it is itself imported.
CI = bool(os.environ.get("CI"))

#: The suite's ports (each keeps its Cluster bus port free too).
PORTS = rig.PortRange.parse(os.environ.get("TB_TEST_SERVER_PORTS", "21200-21299"), bus=True)


def require(name: str) -> str:
    """The path of program ``name``; skips locally, fails under CI, when there is none."""
    try:
        return rig.program(name)
    except rig.Missing as missing:
        if CI:
            raise
        pytest.skip(str(missing))


def redis_server_binary() -> str:
    return require("redis-server")


def free_port() -> int:
    """A port of our range that nothing listens on (and no other server of this run took)."""
    return PORTS.take()


def release_port(port: int) -> None:
    """Gives a port taken by ``free_port`` back, once its server has stopped."""
    PORTS.release(port)


class RedisServer(rig.RedisServer):
    """One ``redis-server`` process of the test's own, on a port of the suite's range."""

    def __init__(
        self,
        directory: Path,
        *args: str,
        password: str | None = None,
        die_with_parent: bool = False,
    ) -> None:
        super().__init__(
            directory, *args, port=free_port(), password=password, die_with_parent=die_with_parent
        )

    def start(self) -> RedisServer:
        redis_server_binary()
        super().start()
        return self


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
) -> Iterator[list[rig.RedisServer]]:
    """The rig's Redis Cluster (``bench.rig.servers.redis_cluster``) on the suite's ports."""
    redis_server_binary()
    require("redis-cli")
    with rig.redis_cluster(directory, PORTS, nodes, replicas, *extra) as servers:
        yield servers
