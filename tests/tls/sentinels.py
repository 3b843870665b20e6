"""A Sentinel set over TLS only: a primary and a replica (``TlsRedisServer``s with the shipped
ACL users, client certificates required, ``tls-replication yes``) and one Sentinel on a
``tls-port`` with ``port 0``. Replication and the Sentinel reach the data servers as the tests'
admin user with the client certificate; clients reach the Sentinel over mutual TLS too."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import quote, urlencode

import redis

from tests.support.helpers import wait_until
from tests.support.servers import free_port, redis_server_binary, release_port
from tests.tls.certs import Certificates
from tests.tls.servers import ADMIN, TlsRedisServer, Users, tls_server

#: The master's name in the Sentinel's configuration.
SERVICE = "tb-tls"


class TlsSentinel:
    """One ``redis-server <conf> --sentinel`` reachable only over mutual TLS."""

    def __init__(
        self, directory: Path, certs: Certificates, users: Users, master_port: int
    ) -> None:
        self.port = free_port()
        self.certs = certs
        directory.mkdir(parents=True, exist_ok=True)
        conf = directory / "sentinel.conf"
        conf.write_text(
            f"port 0\ntls-port {self.port}\nbind 127.0.0.1\ndir {directory}\n"
            f"logfile {directory / 'sentinel.log'}\n"
            f"tls-cert-file {certs.server.cert}\ntls-key-file {certs.server.key}\n"
            f"tls-client-cert-file {certs.client.cert}\n"
            f"tls-client-key-file {certs.client.key}\n"
            f"tls-ca-cert-file {certs.ca}\ntls-auth-clients yes\ntls-replication yes\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 1\n"
            f"sentinel auth-user {SERVICE} {ADMIN}\n"
            f"sentinel auth-pass {SERVICE} {users.admin_password}\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
        )
        conf.chmod(0o600)
        self.proc = subprocess.Popen(
            [redis_server_binary(), str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            decode_responses=True,
            socket_timeout=5,
            ssl=True,
            ssl_ca_certs=str(self.certs.ca),
            ssl_cert_reqs="required",
            ssl_certfile=str(self.certs.client.cert),
            ssl_keyfile=str(self.certs.client.key),
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        release_port(self.port)


class TlsSentinelSet:
    def __init__(
        self, servers: list[TlsRedisServer], sentinel: TlsSentinel, certs: Certificates
    ) -> None:
        self.servers = servers
        self.sentinel = sentinel
        self.certs = certs

    def url_for(self, role: str, users: Users, db: int = 0) -> str:
        """``redis+sentinel://tb-<role>:<password>@127.0.0.1:<port>/<service>/<db>?ssl_...``"""
        query = {
            "ssl_ca_certs": str(self.certs.ca),
            "ssl_cert_reqs": "required",
            "ssl_certfile": str(self.certs.client.cert),
            "ssl_keyfile": str(self.certs.client.key),
        }
        credentials = f"tb-{quote(role, safe='')}:{quote(users.passwords[role], safe='')}"
        return (
            f"redis+sentinel://{credentials}@127.0.0.1:{self.sentinel.port}/{SERVICE}/{db}"
            f"?{urlencode(query)}"
        )

    def master_port(self) -> int:
        return int(self.sentinel.client().sentinel_get_master_addr_by_name(SERVICE)[1])

    def master(self) -> TlsRedisServer:
        port = self.master_port()
        return next(s for s in self.servers if s.port == port)

    def synced(self) -> bool:
        """One master with its replica in sync, as the Sentinel sees it."""
        try:
            master = self.master()
            state = self.sentinel.client().sentinel_master(SERVICE)
            info = master.client().info("replication")
        except (redis.RedisError, StopIteration):
            return False
        return (
            info.get("role") == "master"
            and int(info.get("connected_slaves", 0)) >= 1
            and int(state.get("num-slaves", 0)) >= 1
            and all(
                s.client().info("replication").get("master_link_status") == "up"
                for s in self.servers
                if s is not master
            )
        )

    def failover(self) -> None:
        """``SENTINEL FAILOVER``: the replica is promoted, the old primary follows it."""
        before = self.master_port()
        self.sentinel.client().execute_command("SENTINEL", "FAILOVER", SERVICE)
        wait_until(lambda: self.master_port() != before, "the failover", 60, every=0.1)
        wait_until(self.synced, "the set in sync after the failover", 60, every=0.1)


@contextmanager
def tls_sentinel_set(
    directory: Path, certs: Certificates, users: Users
) -> Iterator[TlsSentinelSet]:
    """A primary, its replica and a Sentinel, all over mutual TLS only."""
    replication = (
        "--tls-replication",
        "yes",
        "--tls-client-cert-file",
        str(certs.client.cert),
        "--tls-client-key-file",
        str(certs.client.key),
        "--masteruser",
        ADMIN,
        "--masterauth",
        users.admin_password,
    )
    with ExitStack() as stack:
        primary = stack.enter_context(
            tls_server(directory / "a", certs, users, *replication, client_certs=True)
        )
        replica = stack.enter_context(
            tls_server(
                directory / "b",
                certs,
                users,
                *replication,
                "--replicaof",
                "127.0.0.1",
                str(primary.port),
                client_certs=True,
            )
        )
        sentinel = TlsSentinel(directory / "sentinel", certs, users, primary.port)
        stack.callback(sentinel.stop)
        sentinels = TlsSentinelSet([primary, replica], sentinel, certs)
        wait_until(sentinels.synced, "the TLS Sentinel set in sync", 60, every=0.1)
        yield sentinels
