"""Access tokens checked by PyJWT: an accepted asymmetric algorithm (never ``none`` or HMAC,
whatever the header says), a trusted issuer, its key's signature, ``aud`` holding the server's
canonical URI, ``exp`` (required) and ``nbf``/``iat`` with the leeway, the tenant claim, and a
tool scope. Each failure is an ``AuthRefused`` with a reason code; nothing of the token is kept.
"""

from __future__ import annotations

from typing import Any

import jwt

from tasks.mcp_server.oauth.config import OAuthConfig
from tasks.mcp_server.oauth.errors import AuthRefused, Reason
from tasks.mcp_server.oauth.keys import Fetch, JwksKeys, StaticKey, fetch_jwks, key_sources
from tasks.mcp_server.oauth.principal import Principal, owner_id, tenant_id, tools_of

#: PyJWT's exceptions, most specific first, and the reason each one is logged as.
_REASONS: tuple[tuple[type[Exception], Reason], ...] = (
    (jwt.ExpiredSignatureError, Reason.EXPIRED),
    (jwt.ImmatureSignatureError, Reason.NOT_YET_VALID),
    (jwt.InvalidAudienceError, Reason.WRONG_AUDIENCE),
    (jwt.MissingRequiredClaimError, Reason.MISSING_CLAIM),
    (jwt.InvalidSignatureError, Reason.BAD_SIGNATURE),
    (jwt.InvalidAlgorithmError, Reason.ALGORITHM_NOT_ALLOWED),
    (jwt.InvalidKeyError, Reason.ALGORITHM_NOT_ALLOWED),
    (jwt.DecodeError, Reason.MALFORMED_TOKEN),
)


def _reason(exc: Exception) -> Reason:
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    return Reason.INVALID_TOKEN


class TokenVerifier:
    """Checks bearer tokens against the configured issuers.

    Args:
        config: the checked configuration.
        fetch: how a JWKS document is fetched (HTTP by default).
    """

    def __init__(self, config: OAuthConfig, *, fetch: Fetch = fetch_jwks) -> None:
        self.config = config
        self._sources: dict[str, JwksKeys | StaticKey] = key_sources(
            config.jwks_uris,
            config.static_keys,
            algorithms=config.algorithms,
            ttl_s=config.jwks_ttl_s,
            refresh_s=config.jwks_refresh_s,
            fetch=fetch,
        )

    async def verify(self, token: str) -> Principal:
        """The token's principal.

        Raises:
            AuthRefused: the token may not be used here (the reason says why).
        """
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise AuthRefused(Reason.MALFORMED_TOKEN) from None
        algorithm, kid = header.get("alg"), header.get("kid")
        # Checked before any key is looked at: the header cannot choose ``none`` or HMAC.
        if not isinstance(algorithm, str) or algorithm not in self.config.algorithms:
            raise AuthRefused(Reason.ALGORITHM_NOT_ALLOWED)
        if kid is not None and not isinstance(kid, str):
            raise AuthRefused(Reason.MALFORMED_TOKEN)
        issuer = unverified.get("iss")
        source = self._sources.get(issuer) if isinstance(issuer, str) else None
        if source is None or not isinstance(issuer, str):
            raise AuthRefused(Reason.UNKNOWN_ISSUER)
        key = await source.key(kid, algorithm)
        if key.algorithm != algorithm:
            raise AuthRefused(Reason.ALGORITHM_NOT_ALLOWED)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm],
                audience=self.config.resource,
                issuer=issuer,
                leeway=self.config.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise AuthRefused(_reason(exc)) from None
        return self._principal(claims, issuer)

    def _principal(self, claims: dict[str, Any], issuer: str) -> Principal:
        value = claims.get(self.config.tenant_claim)
        if isinstance(value, list) and len(value) == 1:
            # A one-member list (Keycloak's ``organization``): that member; more is ambiguous.
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value:
            raise AuthRefused(Reason.MISSING_CLAIM)
        tools = tools_of(self._scopes(claims))
        if tools is not None and not tools:
            raise AuthRefused(Reason.INSUFFICIENT_SCOPE)
        return Principal(owner=owner_id(issuer, value), tenant=tenant_id(value), tools=tools)

    def _scopes(self, claims: dict[str, Any]) -> set[str]:
        """Every scope in the configured claims: a space-separated string (``scope``, RFC
        9068) or a list of strings (``scp``)."""
        scopes: set[str] = set()
        for name in self.config.scope_claims:
            value = claims.get(name)
            if isinstance(value, str):
                scopes.update(value.split())
            elif isinstance(value, list):
                scopes.update(item for item in value if isinstance(item, str))
        return scopes
