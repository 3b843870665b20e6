"""Why a Redis connection or command failed, in one line fit for a log: the refused user, the
missing right, the untrusted certificate, the port that speaks another protocol. Never the
URL, a password or a driver's whole text (``describe``).

Also the start-up probe of the one right a worker's user needs that no other start-up command
exercises: publishing on the seal channels (``check_seal_channel``). Redis 7 gives a new ACL
user no channels (``acl-pubsub-default resetchannels``): without ``&tb:*`` every seal script
would fail at its PUBLISH, so each call would end in retries instead of READY.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis

from boundary.store import keys
from boundary.store.sentinel import UNVERIFIED, is_sentinel_url, parse_sentinel_url

#: OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH = (62, 64)
#: The probe's channel: a run's seal channel no run has (nobody listens on it).
PROBE_CHANNEL = keys.sealed_channel("tool-boundary-check")


@dataclass(frozen=True)
class Reason:
    #: One line, no credentials.
    text: str
    #: Trying again cannot help (a refused password, a missing right, an untrusted certificate).
    permanent: bool


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        todo += [a for a in getattr(current, "args", ()) if isinstance(a, BaseException)]


def _nopermission(exc: BaseException) -> str:
    # Redis's own words ("this user has no permissions to run the 'info' command", "... to
    # access one of the channels used as arguments"): they name a command, never a secret.
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text.removeprefix("NOPERM").strip()
    return f"Redis refused the user a right (NOPERM {text[:200]})"


def describe(exc: BaseException) -> Reason | None:
    """The reason ``exc`` (or an exception it was raised from) names, or ``None``."""
    for current in _chain(exc):
        if isinstance(current, redis.exceptions.NoPermissionError):
            return Reason(_nopermission(current), True)
        if isinstance(current, redis.exceptions.AuthenticationError) or (
            isinstance(current, redis.exceptions.ResponseError)
            and str(current).startswith(("WRONGPASS", "invalid username-password"))
        ):
            return Reason("Redis refused the user name or password (WRONGPASS)", True)
        if isinstance(current, ssl.SSLCertVerificationError):
            if current.verify_code in _NAME_MISMATCH:
                return Reason(
                    "the server's TLS certificate does not name the host in the URL "
                    "(hostname mismatch)",
                    True,
                )
            return Reason(
                "the server's TLS certificate is not trusted "
                f"({current.verify_message or 'certificate verify failed'}; "
                "ssl_ca_certs names the CA to trust)",
                True,
            )
        if isinstance(current, ssl.SSLError):
            return _ssl_reason(current)
        if isinstance(current, TimeoutError) and "handshake" in str(current):
            # A plaintext Redis reads the TLS hello as an unfinished command and waits.
            return Reason(
                "the TLS handshake got no answer: a rediss:// URL for a plaintext port?", False
            )
    return None


def _ssl_reason(exc: ssl.SSLError) -> Reason:
    what = f"{exc.reason or ''} {exc}".upper()
    if "CERTIFICATE_REQUIRED" in what or "CERTIFICATE REQUIRED" in what:
        return Reason(
            "the server requires a client certificate (ssl_certfile and ssl_keyfile)", True
        )
    if any(
        mark in what
        for mark in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG")
    ):
        return Reason("the port does not speak TLS (a rediss:// URL for a plaintext port?)", True)
    if isinstance(exc, ssl.SSLEOFError):
        # (TLS 1.3: the server checks the client's certificate after the client's side of the
        # handshake; its refusal then reads as an EOF, or as the alert, whichever comes first)
        return Reason(
            "the server closed the TLS connection: does it require a client certificate "
            "(ssl_certfile and ssl_keyfile)?",
            False,
        )
    return Reason(f"the TLS handshake failed ({exc.reason or type(exc).__name__})", False)


def plaintext_hint(url: str, exc: BaseException) -> Reason | None:
    """A plaintext URL whose server closed the connection at once: a TLS-only port, likely."""
    if not url.lower().startswith(("redis://", "redis+socket://")):
        return None
    for current in _chain(exc):
        if isinstance(current, redis.exceptions.ConnectionError) and (
            "closed by server" in str(current) or "reset by peer" in str(current).lower()
        ):
            return Reason(
                "the server closed the connection at once: a redis:// URL for a TLS port? "
                "(use rediss://)",
                False,
            )
    return None


def unverified(parts: dict[str, str]) -> list[str]:
    """One warning per named URL (``{"store": url, ...}``) that turns the server certificate's
    verification off (``ssl_cert_reqs=none``, redis-py's, kombu's and Celery's own query)."""
    warnings = []
    for part, url in parts.items():
        query = parse_qs(urlsplit(url).query)
        if url.lower().startswith(("rediss://", "redis+sentinel://")) and any(
            value.strip().lower() in UNVERIFIED for value in query.get("ssl_cert_reqs", [])
        ):
            warnings.append(
                f"the {part}'s TLS certificate is not verified (ssl_cert_reqs=none): anyone "
                "on the path can read and change what it carries"
            )
    return warnings


#: ``ssl_cert_reqs`` values of a URL's query, as the ``ssl`` module names them.
_CERT_REQS = {
    "required": ssl.CERT_REQUIRED,
    "cert_required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "cert_optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
    "cert_none": ssl.CERT_NONE,
}
#: The TLS options of a ``rediss://`` query that ``broker_use_ssl`` repeats.
_SSL_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def _use_ssl(query: dict[str, str]) -> dict[str, Any]:
    options: dict[str, Any] = {name: query[name] for name in _SSL_FILES if query.get(name)}
    reqs = query.get("ssl_cert_reqs", "").strip().lower()
    options["ssl_cert_reqs"] = _CERT_REQS.get(reqs, ssl.CERT_REQUIRED)
    return options


def broker_use_ssl(url: str) -> dict[str, Any]:
    """``{"broker_use_ssl": {...}}``: a ``rediss://`` broker URL's own TLS options, for the
    clients that read only Celery's setting and not the URL (Flower's Broker API, which
    counts the queues); a TLS ``redis+sentinel://`` URL's, which is how kombu reaches the
    master over TLS (``tasks.wiring.sentinel``); ``{}`` for any other URL."""
    if is_sentinel_url(url):
        address = parse_sentinel_url(url)
        return {"broker_use_ssl": _use_ssl(address.tls)} if address.uses_tls else {}
    if not url.lower().startswith("rediss://"):
        return {}
    query = {name: values[-1] for name, values in parse_qs(urlsplit(url).query).items()}
    return {"broker_use_ssl": _use_ssl(query)}


def backend_use_ssl(url: str) -> dict[str, Any]:
    """``{"redis_backend_use_ssl": {...}}`` for a TLS ``redis+sentinel://`` result backend
    (Celery's Sentinel backend then reaches the master with ``SentinelManagedSSLConnection``);
    ``{}`` for any other URL (a ``rediss://`` backend's query already says it to Celery)."""
    if not is_sentinel_url(url):
        return {}
    address = parse_sentinel_url(url)
    return {"redis_backend_use_ssl": _use_ssl(address.tls)} if address.uses_tls else {}


def check_seal_channel(client: Any) -> None:
    """Publishes nothing of use on a seal channel no run has, as the seal script does.

    Raises:
        redis.RedisError: as the client does (a user without the channel: NoPermissionError).
    """
    client.publish(PROBE_CHANNEL, "")
