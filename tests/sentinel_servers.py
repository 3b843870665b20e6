"""A Redis master, its replica and three Sentinels of the test's own (``redis-server
--sentinel``), on ports of ``tests.servers``'s range; stopped by pid when the block ends."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.servers import RedisServer, free_port, redis_server_binary, release_port

#: The master's name in the Sentinels' configuration.
SERVICE = "tb"
#: A master silent this long is down for a Sentinel, ms (Sentinel's default is 30 s).
DOWN_AFTER_MS = 1000
#: Bound of every wait for the topology, seconds (reached only when something is broken).
GIVE_UP_S = 30.0


class SentinelServer:
    """One ``redis-server <conf> --sentinel`` process."""

    def __init__(self, directory: Path, master_port: int) -> None:
        self.port = free_port()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.conf = directory / "sentinel.conf"
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {directory}\n"
            f"logfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self.proc = subprocess.Popen(
            [redis_server_binary(), str(self.conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        release_port(self.port)


@dataclass
class SentinelSetup:
    master: RedisServer
    replica: RedisServer
    sentinels: list[SentinelServer]

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/{db}"

    def master_port(self) -> int:
        reply = self.sentinels[0].client().sentinel_get_master_addr_by_name(SERVICE)
        return int(reply[1])


def _until(condition: object, what: str) -> None:
    give_up = time.monotonic() + GIVE_UP_S
    while True:
        try:
            if condition():  # type: ignore[operator]
                return
        except redis.RedisError:
            pass
        if time.monotonic() > give_up:
            raise RuntimeError(f"the test's Sentinel setup: {what}")
        time.sleep(0.1)


@contextmanager
def sentinel_setup(directory: Path) -> Iterator[SentinelSetup]:
    """A master, a replica of it and three Sentinels that agree on both."""
    master = RedisServer(directory / "master", "--appendonly", "yes")
    master.start()
    replica = RedisServer(
        directory / "replica", "--appendonly", "yes", "--replicaof", "127.0.0.1", str(master.port)
    )
    sentinels: list[SentinelServer] = []
    try:
        replica.start()
        _until(
            lambda: replica.client().info("replication")["master_link_status"] == "up",
            "the replica never synced",
        )
        sentinels = [SentinelServer(directory / f"sentinel{n}", master.port) for n in range(3)]

        def agreed() -> bool:
            state = sentinels[0].client().sentinel_master(SERVICE)
            return int(state["num-slaves"]) >= 1 and int(state["num-other-sentinels"]) >= 2

        _until(agreed, "the Sentinels never saw the replica and each other")
        yield SentinelSetup(master=master, replica=replica, sentinels=sentinels)
    finally:
        for sentinel in sentinels:
            sentinel.stop()
        for server in (replica, master):
            server.stop()
            release_port(server.port)
