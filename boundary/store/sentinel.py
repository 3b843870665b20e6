"""Redis Sentinel addresses: one URL syntax for the store, the broker and the result backend.

``redis+sentinel://[[user]:password@]host1:port1,host2:port2,.../<service>[/<db>][?<tls>]``

The hosts are the Sentinels (port 26379 when left out), ``<service>`` the master's name in
their configuration (``sentinel monitor <service> ...``), ``<db>`` the database (0). The
password is the master's (``requirepass``); Sentinels without a password are assumed.

TLS: a query with any of ``ssl_ca_certs``, ``ssl_cert_reqs``, ``ssl_certfile``,
``ssl_keyfile`` (the names of a ``rediss://`` URL's query), or ``ssl=true``, makes every
connection TLS: to the Sentinels and to the master and replicas they name, with the same CA
and client certificate. The server's certificate is verified unless ``ssl_cert_reqs=none``
says otherwise. Neither kombu nor Celery defines a ``rediss+sentinel`` scheme, so the query
is the one place that says it.

The store connects through redis-py's ``Sentinel.master_for``, which asks the Sentinels for
the master on each new connection, so it follows a failover; ``tasks.wiring.sentinel``
translates the same URL into kombu's and Celery's own forms for the broker and the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

#: The scheme of a Sentinel address.
SENTINEL_SCHEME = "redis+sentinel"
#: A Sentinel's port when the URL names none.
DEFAULT_SENTINEL_PORT = 26379
#: The TLS options a ``redis+sentinel://`` query takes (redis-py's, kombu's and Celery's names).
TLS_OPTIONS = ("ssl_ca_certs", "ssl_cert_reqs", "ssl_certfile", "ssl_keyfile")
#: ``ssl_cert_reqs`` values that turn the certificate check off.
UNVERIFIED = ("none", "cert_none")
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class SentinelAddress:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    #: The query's TLS options (empty: plaintext).
    tls: dict[str, str] = field(default_factory=dict)

    @property
    def uses_tls(self) -> bool:
        return bool(self.tls)

    @property
    def verified(self) -> bool:
        """Whether the servers' certificates are checked (always, unless the query says
        ``ssl_cert_reqs=none``)."""
        return self.tls.get("ssl_cert_reqs", "required").strip().lower() not in UNVERIFIED

    def tls_kwargs(self) -> dict[str, Any]:
        """redis-py's connection options for the URL's TLS (``{}`` for plaintext): given to
        ``Sentinel(sentinel_kwargs=...)`` for the Sentinels and to ``master_for`` for the
        master, so both are reached over TLS."""
        if not self.tls:
            return {}
        options: dict[str, Any] = {"ssl": True, "ssl_cert_reqs": "required"}
        options |= {name: value for name, value in self.tls.items() if name != "ssl"}
        return options


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
        sentinels=sentinels,
        service=unquote(path[0]),
        db=db,
        username=username,
        password=password,
        tls=_tls(parts.query),
    )


def _tls(query: str) -> dict[str, str]:
    options: dict[str, str] = {}
    wanted = False
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "ssl":
            wanted = value.strip().lower() in _TRUE
        elif name in TLS_OPTIONS:
            if value:
                options[name] = value
            wanted = True
        else:
            # (the option's name only: its value may be a path or a secret)
            raise ValueError(f"a redis+sentinel:// URL takes no option {name[:40]!r}")
    if wanted:
        options["ssl"] = "true"
    return options


def _host_port(hostport: str) -> tuple[str, int]:
    host, colon, port = hostport.rpartition(":")
    if not colon:
        return hostport, DEFAULT_SENTINEL_PORT
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ValueError("a Sentinel's port is not a number") from None
