"""The TLS tests' session: a throwaway CA and certificates, and one redis-server reachable
only over TLS with the shipped ACL users (store DB 0, broker DB 1, result backend DB 2)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tls import certs
from tests.tls.servers import TlsRedisServer, Users, tls_server

STORE_DB, BROKER_DB, BACKEND_DB = 0, 1, 2


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> certs.Certificates:
    return certs.make(tmp_path_factory.mktemp("tls-certs"))


@pytest.fixture(scope="session")
def tls_users() -> Users:
    return Users.new()


@pytest.fixture(scope="module")
def tls_redis(
    tmp_path_factory: pytest.TempPathFactory, tls_certs: certs.Certificates, tls_users: Users
) -> Iterator[TlsRedisServer]:
    """A TLS-only redis-server with the shipped ACL file, requiring client certificates."""
    with tls_server(
        tmp_path_factory.mktemp("tls-redis"), tls_certs, tls_users, client_certs=True
    ) as server:
        yield server
