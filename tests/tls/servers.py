"""``redis-server`` over TLS only (``--port 0 --tls-port P``) with the shipped ACL file
(``docs/how-to/production-redis.acl``, read as it is: only its placeholder passwords are
replaced) plus one test-only admin user, on a port of the suite's range.

Under CI a redis-server built without TLS fails the tests; locally they skip with one line."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
import redis

from bench.rig import servers as rig
from tests.support.servers import CI, free_port, redis_server_binary, release_port
from tests.tls.acl_trace import AclTrace
from tests.tls.certs import Certificates, Pair

ROOT = Path(__file__).resolve().parents[2]
#: The ACL file the docs ship, one user per role.
ACL_FILE = ROOT / "docs" / "how-to" / "production-redis.acl"
#: The shipped file's placeholder passwords: ``>CHANGE-ME-<role>``.
PLACEHOLDER = re.compile(r">CHANGE-ME-([a-z-]+)")
#: The tests' own user, for setting up and reading what a test needs (never a product path).
ADMIN = "tb-test-admin"
#: The roles of the shipped file, by the role name in its placeholder.
ROLES = ("worker", "caller", "reaper", "operator-read", "operator", "mcp")


def require_tls() -> None:
    """Skips (locally) or fails (under CI) when this redis-server was built without TLS."""
    binary = redis_server_binary()
    probe = subprocess.run(
        # (an unknown directive after it stops the server before it listens: a build without
        # TLS names ``tls-port`` as the bad line, one with TLS the unknown one)
        [binary, "--port", "0", "--tls-port", "1", "--no-such-directive", "1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )
    text = probe.stdout + probe.stderr
    if "'tls-port" in text:
        message = f"{binary} was built without TLS (BUILD_TLS=yes)"
        if CI:
            pytest.fail(message)
        pytest.skip(message)


def acl_text(passwords: dict[str, str], admin_password: str) -> str:
    """The shipped ACL file with ``passwords`` (by role) in place of its placeholders, and the
    tests' admin user."""
    shipped = ACL_FILE.read_text()
    roles = set(PLACEHOLDER.findall(shipped))
    assert roles == set(ROLES), roles
    text = PLACEHOLDER.sub(lambda m: ">" + passwords[m.group(1)], shipped)
    return text.rstrip("\n") + f"\nuser {ADMIN} on >{admin_password} ~* &* +@all\n"


def role_rules(role: str) -> list[str]:
    """The shipped file's rules of ``role``'s user, without its password."""
    line = next(line for line in ACL_FILE.read_text().splitlines() if f" tb-{role} " in line)
    return [rule for rule in line.split()[3:] if not rule.startswith((">", "#"))]


def add_user(server: TlsRedisServer, user: str, password: str, rules: list[str]) -> None:
    """A user of the test's own, made with ``ACL SETUSER`` (as the docs' lines do)."""
    server.client().execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Users:
    passwords: dict[str, str]
    admin_password: str

    @classmethod
    def new(cls) -> Users:
        return cls({role: secrets.token_hex(16) for role in ROLES}, secrets.token_hex(16))


class TlsRedisServer(rig.RedisServer):
    """One ``redis-server`` reachable only over TLS, with the shipped users (``users``).
    ``server_pair``: the certificate it presents (the trusted one unless a test says);
    ``client_certs``: whether it requires client certificates (mutual TLS)."""

    def __init__(
        self,
        directory: Path,
        certs: Certificates,
        users: Users,
        *args: str,
        client_certs: bool = False,
        server_pair: Pair | None = None,
    ) -> None:
        super().__init__(directory, *args, port=free_port(), name="tls", client_timeout_s=5)
        self.certs = certs
        self.users = users
        self.client_certs = client_certs
        self.pair = server_pair or certs.server
        self.trace: AclTrace | None = None

    def start(self) -> TlsRedisServer:
        super().start()
        # (``tests.tls.acl_trace``: only when asked, to re-derive the ACL file's lists)
        trace = os.environ.get("TB_TEST_ACL_TRACE")
        if trace and self.trace is None:
            self.trace = AclTrace(self.client, Path(trace), str(self.port))
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.trace is not None and self.running:
            self.trace.dump()
            self.trace = None
        super().stop(sig)

    def command(self) -> list[str]:
        acl = self.directory / "users.acl"
        acl.write_text(acl_text(self.users.passwords, self.users.admin_password))
        acl.chmod(0o600)
        command = super().command()
        at = command.index("--port")
        command[at : at + 2] = ["--port", "0", "--tls-port", str(self.port)]
        return [
            *command,
            "--tls-cert-file",
            str(self.pair.cert),
            "--tls-key-file",
            str(self.pair.key),
            "--tls-ca-cert-file",
            str(self.certs.ca),
            "--tls-auth-clients",
            "yes" if self.client_certs else "no",
            "--aclfile",
            str(acl),
        ]

    def _tls(self) -> dict[str, object]:
        options: dict[str, object] = {
            "ssl": True,
            "ssl_ca_certs": str(self.certs.ca),
            "ssl_cert_reqs": "required",
        }
        if self.client_certs:
            options |= {
                "ssl_certfile": str(self.certs.client.cert),
                "ssl_keyfile": str(self.certs.client.key),
            }
        return options

    def client(self, **options: object) -> redis.Redis:
        """The tests' admin client (never a product path's)."""
        options.setdefault("socket_timeout", self.client_timeout_s)
        if self.pair is not self.certs.server:
            # (a server with a certificate the product must refuse: the tests' client skips it)
            tls = {"ssl": True, "ssl_cert_reqs": "none"}
        else:
            tls = self._tls()
        return redis.Redis(
            host="localhost",
            port=self.port,
            username=ADMIN,
            password=self.users.admin_password,
            decode_responses=True,
            **tls,  # type: ignore[arg-type]
            **options,  # type: ignore[arg-type]
        )

    def role_client(self, role: str, db: int = 0, **options: object) -> redis.Redis:
        return redis.Redis.from_url(self.url_for(role, db), decode_responses=True, **options)

    def url_for(self, role: str, db: int, *, client_cert: bool | None = None) -> str:
        """``rediss://tb-<role>:<password>@localhost:<port>/<db>?ssl_ca_certs=...``, with the
        client certificate when the server requires one (or ``client_cert`` says)."""
        return self.url_as(f"tb-{role}", self.users.passwords[role], db, client_cert=client_cert)

    def url_as(self, user: str, password: str, db: int, *, client_cert: bool | None = None) -> str:
        query = {"ssl_ca_certs": str(self.certs.ca), "ssl_cert_reqs": "required"}
        if self.client_certs if client_cert is None else client_cert:
            query |= {
                "ssl_certfile": str(self.certs.client.cert),
                "ssl_keyfile": str(self.certs.client.key),
            }
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}"
        return f"rediss://{credentials}@localhost:{self.port}/{db}?{urlencode(query)}"

    def db_url(self, db: int) -> str:
        return self.url_as(ADMIN, self.users.admin_password, db)


@contextmanager
def tls_server(
    directory: Path, certs: Certificates, users: Users, *args: str, **options: object
) -> Iterator[TlsRedisServer]:
    require_tls()
    server = TlsRedisServer(directory, certs, users, *args, **options)  # type: ignore[arg-type]
    try:
        yield server.start()  # type: ignore[misc]
    finally:
        server.stop()
        release_port(server.port)
