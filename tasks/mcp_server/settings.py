"""The MCP server's settings (``TOOL_BOUNDARY_MCP_*``), apart from the workers' ones."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tasks.mcp_server.options import CallOptions

#: Where ``--transport http`` listens by default.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765

#: The only signature algorithms a token may use: asymmetric, so a key the server fetches or
#: is given can only verify, never sign. ``none`` and every HMAC algorithm are refused.
ASYMMETRIC_ALGORITHMS = ("RS256", "ES256", "EdDSA")


class MCPSettings(BaseSettings, CallOptions):
    """The call options (``tasks.mcp_server.options.CallOptions``: ``POLL_INTERVAL_MS``,
    ``CALL_WAIT_S``, ``PROGRESS_S``, ``TASK_SUPPORT``, ``TOOL_TASK_SUPPORT``,
    ``REQUIRE_CALL_ID``), and the door's own settings.

    ``TOOL_BOUNDARY_MCP_TOKEN`` is the HTTP bearer token: required to bind anywhere but
    loopback, enforced on loopback too when set. It is never logged or echoed.

    The ``AUTH_*`` settings, ``RESOURCE``, ``TENANT_CLAIM``, ``SCOPE_CLAIMS`` and ``JWKS_*``
    make the HTTP server an OAuth 2.1 resource server instead (``docs/how-to/mcp-oauth.md``).
    """

    model_config = SettingsConfigDict(env_prefix="TOOL_BOUNDARY_MCP_", extra="ignore")

    #: The static bearer token of ``--transport http``: required off loopback unless OAuth
    #: issuers are set, enforced on loopback too once set; never logged or echoed.
    token: SecretStr | None = None

    #: The server's canonical URI (RFC 8707), e.g. ``https://mcp.example.com/mcp``: a token's
    #: ``aud`` must contain it.
    resource: str | None = None
    #: Trusted issuers and their JWKS URI, as JSON: ``{"https://idp.example.com": "https://..."}``.
    auth_issuers: dict[str, str] = {}
    #: Trusted issuers with one static public key instead (PEM text, or a path to a PEM file).
    auth_keys: dict[str, str] = {}
    #: Signature algorithms accepted, a subset of ``ASYMMETRIC_ALGORITHMS``.
    auth_algorithms: list[str] = list(ASYMMETRIC_ALGORITHMS)
    #: Clock skew tolerated on ``exp``, ``nbf`` and ``iat``, seconds.
    auth_leeway_s: float = Field(default=30.0, ge=0, le=300)
    #: The claim that becomes ``RunContext.tenant`` and the requester tasks and runs belong to.
    tenant_claim: str = Field(default="sub", min_length=1)
    #: Claims read for scopes (a space-separated string or a list of strings each), in union.
    scope_claims: list[str] = Field(default_factory=lambda: ["scope", "scp"], min_length=1)
    #: How long a fetched JWKS is used before it is fetched again, seconds.
    jwks_ttl_s: float = Field(default=300.0, gt=0)
    #: Least time between two fetches caused by a token with an unknown ``kid``, per issuer.
    jwks_refresh_s: float = Field(default=30.0, ge=0)

    @field_validator("auth_algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        if not value or any(alg not in ASYMMETRIC_ALGORITHMS for alg in value):
            raise ValueError(f"algorithms must be among {', '.join(ASYMMETRIC_ALGORITHMS)}")
        return value

    @property
    def oauth(self) -> bool:
        """True when an issuer is configured: HTTP requests need a token from one of them."""
        return bool(self.auth_issuers or self.auth_keys)
