"""A Sentinel set the chaos run owns (``--sentinel``): a master, a replica and three Sentinels
that watch them; the store and the result backend reach the master through them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis

from bench.rig.servers import PortRange, RedisProcess, redis_server_binary

#: The master's name in the Sentinels' configuration (the URL's service).
SERVICE = "chaos"
#: A master silent this long is down for a Sentinel, ms.
DOWN_AFTER_MS = 1000
#: Bound of every wait for the set to agree, seconds.
GIVE_UP_S = 60.0


class SentinelProcess:
    """One ``redis-server <conf> --sentinel``."""

    def __init__(self, port: int, directory: Path, master_port: int) -> None:
        self.port = port
        directory.mkdir(parents=True, exist_ok=True)
        conf = directory / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
            f"logfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
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

    def __init__(self, directory: Path, ports: PortRange, *, min_replicas: int = 0) -> None:
        #: ``min-replicas-to-write``: a master without that many replicas in sync (lag at most
        #: 10 s) refuses writes, so none is acknowledged that a failover could lose.
        self.guard: tuple[str, ...] = (
            ("--min-replicas-to-write", str(min_replicas), "--min-replicas-max-lag", "10")
            if min_replicas
            else ()
        )
        first = RedisProcess(
            "sentinel-a", ports.take(), directory / "a", appendonly=True, extra=self.guard
        )
        first.start()
        replica_of = ("--replicaof", "127.0.0.1", str(first.port))
        second = RedisProcess(
            "sentinel-b",
            ports.take(),
            directory / "b",
            appendonly=True,
            extra=(*replica_of, *self.guard),
        )
        second.start()
        self.servers = [first, second]
        self.sentinels = [
            SentinelProcess(ports.take(), directory / f"sentinel{n}", first.port) for n in range(3)
        ]
        _until(self._agreed, "the Sentinels never saw the replica and each other")

    def _agreed(self) -> bool:
        state = self.sentinels[0].client().sentinel_master(SERVICE)
        return int(state["num-slaves"]) >= 1 and int(state["num-other-sentinels"]) >= 2

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/{db}"

    def master(self) -> RedisProcess:
        """The server the Sentinels name as master now."""
        host_port = self.sentinels[0].client().sentinel_get_master_addr_by_name(SERVICE)
        port = int(host_port[1])
        return next(s for s in self.servers if s.port == port)

    def replica(self) -> RedisProcess:
        master = self.master()
        return next(s for s in self.servers if s is not master)

    def failover(self) -> None:
        """``SENTINEL FAILOVER``: the replica is promoted, the old master follows it."""
        before = self.master().port
        self.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", SERVICE)
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

    def restart_as_replica(self, server: RedisProcess) -> None:
        """Starts a killed server again as a replica of the current master (Sentinel would
        reconfigure it anyway; this avoids a second master for a moment)."""
        master = self.master()
        server.extra = ("--replicaof", "127.0.0.1", str(master.port), *self.guard)
        server.start()

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()


def _until(condition: object, what: str) -> None:
    give_up = time.monotonic() + GIVE_UP_S
    while True:
        try:
            if condition():  # type: ignore[operator]
                return
        except (redis.RedisError, StopIteration):
            pass
        if time.monotonic() > give_up:
            raise RuntimeError(f"the chaos run's Sentinel set: {what}")
        time.sleep(0.1)
