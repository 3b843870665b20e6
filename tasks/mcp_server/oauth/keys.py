"""Issuers' public keys: a static PEM key, or a JWKS fetched with the MCP SDK's HTTP client
(``httpx2``), kept for a TTL and fetched again early when a token names a ``kid`` the set does
not hold (an issuer that rotated its keys), at most once per ``refresh_s`` so a flood of
made-up ``kid`` values cannot hammer the issuer.

Keys are parsed by PyJWT and ``cryptography``; only asymmetric public keys of an accepted
algorithm are kept (no ``oct`` key, no private key, no RSA key under 2048 bits).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from tasks.mcp_server.oauth.errors import AuthRefused, Reason

logger = logging.getLogger(__name__)

#: Smallest RSA key accepted, bits.
MIN_RSA_BITS = 2048
#: Largest JWKS document read, bytes.
MAX_JWKS_BYTES = 256 * 1024
#: One JWKS fetch's time limit, seconds.
FETCH_TIMEOUT_S = 5.0
#: After a failed fetch, the least time before the next one, seconds.
FAILED_FETCH_BACKOFF_S = 5.0

#: Fetches a JWKS document from a URI (the tests inject none: they serve one over HTTP).
Fetch = Callable[[str], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class VerifyingKey:
    """A public key and the one algorithm it verifies."""

    key: Any
    algorithm: str


def algorithm_of(key: object) -> str | None:
    """The algorithm an asymmetric public key verifies, ``None`` for any other key."""
    if isinstance(key, rsa.RSAPublicKey):
        return "RS256" if key.key_size >= MIN_RSA_BITS else None
    if isinstance(key, ec.EllipticCurvePublicKey):
        return "ES256" if isinstance(key.curve, ec.SECP256R1) else None
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return "EdDSA"
    return None


def pem_key(pem: bytes, algorithms: tuple[str, ...]) -> VerifyingKey:
    """A static key from PEM text.

    Raises:
        ValueError: not a PEM public key of an accepted algorithm.
    """
    key = serialization.load_pem_public_key(pem)
    algorithm = algorithm_of(key)
    if algorithm is None or algorithm not in algorithms:
        raise ValueError("not a public key of an accepted algorithm")
    return VerifyingKey(key, algorithm)


def jwk_key(jwk: object, algorithms: tuple[str, ...]) -> VerifyingKey | None:
    """A JWKS entry as a verifying key; ``None`` for an entry this server must not use."""
    if not isinstance(jwk, dict) or "d" in jwk or jwk.get("use", "sig") != "sig":
        return None
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return None
    try:
        parsed = jwt.PyJWK(jwk)
    except (jwt.PyJWTError, ValueError, TypeError, KeyError):
        return None
    algorithm = algorithm_of(parsed.key)
    if algorithm is None or algorithm != parsed.algorithm_name or algorithm not in algorithms:
        return None
    return VerifyingKey(parsed.key, algorithm)


class KeySet:
    """Verifying keys by ``kid`` (a key without one is kept apart)."""

    def __init__(self, document: object, algorithms: tuple[str, ...]) -> None:
        self.by_kid: dict[str, VerifyingKey] = {}
        self.unnamed: list[VerifyingKey] = []
        entries = document.get("keys") if isinstance(document, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            key = jwk_key(entry, algorithms)
            if key is None:
                continue
            kid = entry.get("kid")
            if isinstance(kid, str):
                self.by_kid.setdefault(kid, key)
            else:
                self.unnamed.append(key)

    def __contains__(self, kid: str | None) -> bool:
        return kid is not None and kid in self.by_kid

    def find(self, kid: str | None, algorithm: str) -> VerifyingKey | None:
        """The key a token names; a token without ``kid`` needs exactly one candidate."""
        if kid is not None:
            return self.by_kid.get(kid)
        candidates = [
            key for key in [*self.by_kid.values(), *self.unnamed] if key.algorithm == algorithm
        ]
        return candidates[0] if len(candidates) == 1 else None


class StaticKey:
    """An issuer configured with one public key (``TOOL_BOUNDARY_MCP_AUTH_KEYS``)."""

    def __init__(self, key: VerifyingKey) -> None:
        self._key = key

    async def key(self, kid: str | None, algorithm: str) -> VerifyingKey:
        return self._key


async def fetch_jwks(uri: str) -> Any:
    """The JWKS document at ``uri`` (no redirect followed, at most ``MAX_JWKS_BYTES``).

    Raises:
        httpx2.HTTPError, ValueError: the document could not be fetched or read.
    """
    timeout = httpx2.Timeout(FETCH_TIMEOUT_S)
    async with (
        httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as client,
        client.stream("GET", uri, headers={"Accept": "application/json"}) as response,
    ):
        if response.status_code != 200:
            raise ValueError(f"HTTP {response.status_code}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_JWKS_BYTES:
                raise ValueError("JWKS document too large")
    return json.loads(bytes(body))


class JwksKeys:
    """An issuer's JWKS, fetched on first use and kept ``ttl_s``; fetched again early for an
    unknown ``kid`` at most once per ``refresh_s``. A failed fetch keeps the last good set
    and is not retried for ``FAILED_FETCH_BACKOFF_S``, so an issuer outage does not stall
    every request on a fetch."""

    def __init__(
        self,
        uri: str,
        *,
        algorithms: tuple[str, ...],
        ttl_s: float,
        refresh_s: float,
        fetch: Fetch = fetch_jwks,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._uri = uri
        self._algorithms = algorithms
        self._ttl_s = ttl_s
        self._refresh_s = refresh_s
        self._fetch = fetch
        self._clock = clock
        self._keys: KeySet | None = None
        self._next_fetch = -math.inf
        self._next_forced = -math.inf
        self._lock = asyncio.Lock()

    async def key(self, kid: str | None, algorithm: str) -> VerifyingKey:
        """The key that verifies the token.

        Raises:
            AuthRefused: ``UNKNOWN_KEY``, or ``KEYS_UNAVAILABLE`` when no set was ever fetched.
        """
        if self._clock() >= self._next_fetch:
            await self._refresh(forced=False)
        keys = self._keys
        if keys is not None and kid is not None and kid not in keys:
            if self._clock() >= self._next_forced:
                await self._refresh(forced=True)
            keys = self._keys
        if keys is None:
            raise AuthRefused(Reason.KEYS_UNAVAILABLE)
        found = keys.find(kid, algorithm)
        if found is None:
            raise AuthRefused(Reason.UNKNOWN_KEY)
        return found

    async def _refresh(self, *, forced: bool) -> None:
        async with self._lock:
            now = self._clock()
            # Another request may have fetched while this one waited for the lock.
            if now < (self._next_forced if forced else self._next_fetch):
                return
            if forced:
                self._next_forced = now + self._refresh_s
            try:
                document = await self._fetch(self._uri)
            except Exception as exc:
                logger.warning("JWKS fetch failed: %s", _failure(exc))
                # From the failure's end, not its start: the requests that queued on the lock
                # behind a fetch that timed out must not each try again in turn.
                self._next_fetch = self._clock() + FAILED_FETCH_BACKOFF_S
                return
            self._keys = KeySet(document, self._algorithms)
            self._next_fetch = now + self._ttl_s


def _failure(exc: Exception) -> str:
    """A fetch failure for the log: the exception's type, or the HTTP status; never a URL."""
    if isinstance(exc, ValueError) and str(exc).startswith("HTTP "):
        return str(exc)
    return type(exc).__name__


def key_sources(
    jwks_uris: Mapping[str, str],
    static_keys: Mapping[str, VerifyingKey],
    *,
    algorithms: tuple[str, ...],
    ttl_s: float,
    refresh_s: float,
    fetch: Fetch = fetch_jwks,
) -> dict[str, JwksKeys | StaticKey]:
    """One key source per trusted issuer."""
    sources: dict[str, JwksKeys | StaticKey] = {
        issuer: StaticKey(key) for issuer, key in static_keys.items()
    }
    for issuer, uri in jwks_uris.items():
        sources[issuer] = JwksKeys(
            uri, algorithms=algorithms, ttl_s=ttl_s, refresh_s=refresh_s, fetch=fetch
        )
    return sources
