"""The resource server's configuration, checked once at start-up from ``MCPSettings``: a
``ConfigurationError`` names the setting to fix, never a value (values may hold URLs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from boundary import ConfigurationError
from tasks.mcp_server.oauth.keys import VerifyingKey, pem_key
from tasks.mcp_server.settings import MCPSettings
from tasks.settings import is_loopback

#: Where Protected Resource Metadata (RFC 9728) is served; the resource's path follows it in
#: the document's RFC 9728 URL (``/.well-known/oauth-protected-resource/mcp``).
METADATA_PATH = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True)
class OAuthConfig:
    """What the resource server checks; ``TOOL_BOUNDARY_MCP_*`` in ``docs/how-to/mcp-oauth.md``."""

    resource: str
    jwks_uris: dict[str, str]
    static_keys: dict[str, VerifyingKey]
    algorithms: tuple[str, ...]
    leeway_s: float
    tenant_claim: str
    scope_claims: tuple[str, ...]
    jwks_ttl_s: float
    jwks_refresh_s: float
    #: Tools named in ``scopes_supported`` (the registry's read-only tools).
    tool_names: tuple[str, ...] = field(default=())

    @property
    def issuers(self) -> list[str]:
        return sorted({*self.jwks_uris, *self.static_keys})

    @property
    def resource_path(self) -> str:
        return urlsplit(self.resource).path.rstrip("/")

    @property
    def metadata_url(self) -> str:
        """The RFC 9728 URL of the resource's metadata: the well-known path inserted between
        the host and the resource's path."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}{METADATA_PATH}{self.resource_path}"


def _check_url(value: str, setting: str, *, query: bool = True) -> None:
    """``https``, or ``http`` on a loopback host; a host; no fragment (nor query, for
    identifiers that may not have one)."""
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
    except ValueError:
        raise ConfigurationError(f"{setting} holds a URL that cannot be parsed") from None
    secure = parts.scheme == "https" or (parts.scheme == "http" and is_loopback(host))
    if not (secure and host) or parts.fragment or (parts.query and not query):
        raise ConfigurationError(
            f"{setting}: every URL must be https (http only on loopback), with a host, "
            "without a fragment" + ("" if query else " or a query")
        )


def _static_key(value: str, algorithms: tuple[str, ...]) -> VerifyingKey:
    """PEM text, or the path of a PEM file."""
    try:
        is_text = value.lstrip().startswith("-----BEGIN")
        pem = value.encode() if is_text else Path(value).read_bytes()
        return pem_key(pem, algorithms)
    except (OSError, ValueError, TypeError):
        raise ConfigurationError(
            "TOOL_BOUNDARY_MCP_AUTH_KEYS: each value must be a PEM public key (RSA of 2048 bits "
            "or more, P-256, Ed25519) of an accepted algorithm, or the path of one"
        ) from None


def oauth_config(settings: MCPSettings, tool_names: tuple[str, ...] = ()) -> OAuthConfig:
    """The checked configuration.

    Raises:
        ConfigurationError: no ``TOOL_BOUNDARY_MCP_RESOURCE``, a URL that is not https (or
            http on loopback), an issuer in both issuer settings, a bad static key, or the
            static token set as well.
    """
    if settings.token is not None:
        raise ConfigurationError(
            "set TOOL_BOUNDARY_MCP_TOKEN or the TOOL_BOUNDARY_MCP_AUTH_* issuers, not both"
        )
    if not settings.resource:
        raise ConfigurationError(
            "TOOL_BOUNDARY_MCP_RESOURCE (the server's canonical URI) is needed with issuers"
        )
    _check_url(settings.resource, "TOOL_BOUNDARY_MCP_RESOURCE", query=False)
    both = set(settings.auth_issuers) & set(settings.auth_keys)
    if both:
        raise ConfigurationError(
            "an issuer is in both TOOL_BOUNDARY_MCP_AUTH_ISSUERS and TOOL_BOUNDARY_MCP_AUTH_KEYS"
        )
    for issuer, uri in settings.auth_issuers.items():
        _check_url(issuer, "TOOL_BOUNDARY_MCP_AUTH_ISSUERS", query=False)
        _check_url(uri, "TOOL_BOUNDARY_MCP_AUTH_ISSUERS")
    for issuer in settings.auth_keys:
        _check_url(issuer, "TOOL_BOUNDARY_MCP_AUTH_KEYS", query=False)
    algorithms = tuple(dict.fromkeys(settings.auth_algorithms))
    static = {
        issuer: _static_key(value, algorithms) for issuer, value in settings.auth_keys.items()
    }
    return OAuthConfig(
        resource=settings.resource,
        jwks_uris=dict(settings.auth_issuers),
        static_keys=static,
        algorithms=algorithms,
        leeway_s=settings.auth_leeway_s,
        tenant_claim=settings.tenant_claim,
        scope_claims=tuple(settings.scope_claims),
        jwks_ttl_s=settings.jwks_ttl_s,
        jwks_refresh_s=settings.jwks_refresh_s,
        tool_names=tool_names,
    )
