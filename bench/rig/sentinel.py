"""A Sentinel set of our own: a master, a replica and three Sentinels that watch them (the
chaos run's ``--sentinel``, the Sentinel tests); clients reach the master through them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis

from bench.rig.servers import PortRange, RedisServer, aof, redis_server_binary

#: The master's name in the Sentinels' configuration (the URL's service).
SERVICE = "tb"
#: A master silent this long is down for a Sentinel, ms.
DOWN_AFTER_MS = 1000
#: Bound of every wait for the set to agree, seconds.
GIVE_UP_S = 60.0


class SentinelProcess:
    """One ``redis-server <conf> --sentinel``."""

    def __init__(self, port: int, directory: Path, master_port: int, service: str) -> None:
        self.port = port
        directory.mkdir(parents=True, exist_ok=True)
        conf = directory / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
            f"logfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {service} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {service} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {service} 10000\n"
            f"sentinel parallel-syncs {service} 1\n"
        )
        self.proc = subprocess.Popen(
            [redis_server_binary(), str(conf), "--sentinel"],
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


class SentinelSet:
    """Two data servers (AOF on both) that swap roles on a failover, and three Sentinels."""

    def __init__(
        self,
        directory: Path,
        ports: PortRange,
        *,
        min_replicas: int = 0,
        service: str = SERVICE,
    ) -> None:
        self.ports = ports
        self.service = service
        #: ``min-replicas-to-write``: a master without that many replicas in sync (lag at most
        #: 10 s) refuses writes, so none is acknowledged that a failover could lose.
        self.guard: tuple[str, ...] = (
            ("--min-replicas-to-write", str(min_replicas), "--min-replicas-max-lag", "10")
            if min_replicas
            else ()
        )
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelProcess] = []
        try:
            first = self._server("sentinel-a", directory / "a", *self.guard)
            replica_of = ("--replicaof", "127.0.0.1", str(first.port))
            second = self._server("sentinel-b", directory / "b", *replica_of, *self.guard)
            _until(
                lambda: second.client().info("replication")["master_link_status"] == "up",
                "the replica never synced",
            )
            self.sentinels = [
                SentinelProcess(ports.take(), directory / f"sentinel{n}", first.port, service)
                for n in range(3)
            ]
            _until(self._agreed, "the Sentinels never saw the replica and each other")
        except BaseException:
            self.stop()
            raise

    def _server(self, name: str, directory: Path, *args: str) -> RedisServer:
        server = RedisServer(
            directory, *aof(True), *args, port=self.ports.take(), name=name, client_timeout_s=5
        )
        self.servers.append(server)
        return server.start()

    def _agreed(self) -> bool:
        state = self.sentinels[0].client().sentinel_master(self.service)
        return int(state["num-slaves"]) >= 1 and int(state["num-other-sentinels"]) >= 2

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/{db}"

    def master_port(self) -> int:
        """The port of the server the Sentinels name as master now."""
        host_port = self.sentinels[0].client().sentinel_get_master_addr_by_name(self.service)
        return int(host_port[1])

    def master(self) -> RedisServer:
        """The server the Sentinels name as master now."""
        port = self.master_port()
        return next(s for s in self.servers if s.port == port)

    def replica(self) -> RedisServer:
        master = self.master()
        return next(s for s in self.servers if s is not master)

    def failover(self) -> None:
        """``SENTINEL FAILOVER``: the replica is promoted, the old master follows it."""
        before = self.master().port
        self.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", self.service)
        _until(lambda: self.master().port != before, "the failover never happened")

    def healthy(self) -> bool:
        """Every server up, one master with a replica in sync."""
        if not all(s.running and not s.paused for s in self.servers):
            return False
        try:
            info = self.master().client(socket_timeout=2).info("replication")
        except redis.RedisError:
            return False
        return info.get("role") == "master" and int(info.get("connected_slaves", 0)) >= 1

    def restart_as_replica(self, server: RedisServer) -> None:
        """Starts a killed server again as a replica of the current master (Sentinel would
        reconfigure it anyway; this avoids a second master for a moment)."""
        master = self.master()
        server.args = (*aof(True), "--replicaof", "127.0.0.1", str(master.port), *self.guard)
        server.start()

    def stop(self) -> None:
        """Stops every process and gives its port back."""
        for sentinel in self.sentinels:
            sentinel.stop()
            self.ports.release(sentinel.port)
        for server in self.servers:
            server.stop()
            self.ports.release(server.port)


def _until(condition: object, what: str) -> None:
    give_up = time.monotonic() + GIVE_UP_S
    while True:
        try:
            if condition():  # type: ignore[operator]
                return
        except (redis.RedisError, StopIteration):
            pass
        if time.monotonic() > give_up:
            raise RuntimeError(f"the Sentinel set: {what}")
        time.sleep(0.1)
