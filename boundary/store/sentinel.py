"""Redis Sentinel addresses: one URL syntax for the store, the broker and the result backend.

``redis+sentinel://[[user]:password@]host1:port1,host2:port2,.../<service>[/<db>]``

The hosts are the Sentinels (port 26379 when left out), ``<service>`` the master's name in
their configuration (``sentinel monitor <service> ...``), ``<db>`` the database (0). The
password is the master's (``requirepass``); Sentinels without a password are assumed. The
store connects through redis-py's ``Sentinel.master_for``, which asks the Sentinels for the
master on each new connection, so it follows a failover; ``tasks.wiring.sentinel`` translates the
same URL into kombu's and Celery's own forms for the broker and the backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

#: The scheme of a Sentinel address.
SENTINEL_SCHEME = "redis+sentinel"
#: A Sentinel's port when the URL names none.
DEFAULT_SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelAddress:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(SENTINEL_SCHEME + "://")


def parse_sentinel_url(url: str) -> SentinelAddress:
    """The address of a ``redis+sentinel://`` URL.

    Raises:
        ValueError: not such a URL, no Sentinel, no service name, or a bad port or DB (the
            message names no part of the URL: it may hold a password).
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != SENTINEL_SCHEME:
        raise ValueError("not a redis+sentinel:// URL")
    credentials, _, hosts = parts.netloc.rpartition("@")
    username = password = None
    if credentials:
        user, colon, secret = credentials.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = tuple(_host_port(hostport) for hostport in hosts.split(",") if hostport)
    if not sentinels:
        raise ValueError("a redis+sentinel:// URL names no Sentinel")
    path = [piece for piece in parts.path.split("/") if piece]
    if not path or len(path) > 2:
        raise ValueError("a redis+sentinel:// URL needs /<service>[/<db>]")
    try:
        db = int(path[1]) if len(path) == 2 else 0
    except ValueError:
        raise ValueError("a redis+sentinel:// URL's DB is not a number") from None
    return SentinelAddress(
        sentinels=sentinels, service=unquote(path[0]), db=db, username=username, password=password
    )


def _host_port(hostport: str) -> tuple[str, int]:
    host, colon, port = hostport.rpartition(":")
    if not colon:
        return hostport, DEFAULT_SENTINEL_PORT
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ValueError("a Sentinel's port is not a number") from None
