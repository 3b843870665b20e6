"""The resource server's parts on their own: the configuration checks, the token verifier
(static keys of every accepted algorithm, JWKS over real HTTP, an issuer that cannot be
reached), and how claims become the tenant and the requester."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from boundary import ConfigurationError, ErrorCode, RunContext, ToolBoundary
from boundary.models import is_safe_id
from tasks.mcp_server.calls import BoundaryCalls
from tasks.mcp_server.main import check_binding
from tasks.mcp_server.oauth.config import OAuthConfig, oauth_config
from tasks.mcp_server.oauth.errors import AuthRefused, Reason
from tasks.mcp_server.oauth.keys import JwksKeys
from tasks.mcp_server.oauth.principal import Principal, owner_id, tenant_id
from tasks.mcp_server.oauth.tokens import TokenVerifier
from tasks.mcp_server.settings import MCPSettings
from tests.mcp.conftest import RUN, RUN_ID
from tests.mcp.issuer import Issuer, public_pem, serving_issuer

RESOURCE = "https://mcp.example.com/mcp"
ISSUER = "https://idp.example.com/realms/tools"


def settings(**fields: Any) -> MCPSettings:
    return MCPSettings(_env_file=None, **fields)  # type: ignore[call-arg]


def verify(config: OAuthConfig, token: str) -> Principal:
    return anyio.run(TokenVerifier(config).verify, token)


def refusal(config: OAuthConfig, token: str) -> Reason:
    with pytest.raises(AuthRefused) as refused:
        verify(config, token)
    return refused.value.reason


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with serving_issuer() as served:
        yield served


def test_a_safe_claim_value_is_the_tenant_and_any_other_a_stable_digest() -> None:
    assert tenant_id("acme") == "acme"
    hashed = tenant_id("Acme Corp <ops@acme.example>")
    assert hashed == tenant_id("Acme Corp <ops@acme.example>") and is_safe_id(hashed)
    assert hashed.startswith("t-") and len(hashed) == 34
    # A safe value shaped like a digest is hashed too, so it cannot take another's tenant
    assert tenant_id(hashed) != hashed
    assert tenant_id("x" * 200) != "x" * 128 and is_safe_id(tenant_id("x" * 200))


def test_the_same_subject_from_two_issuers_is_two_requesters() -> None:
    assert owner_id("https://a.example", "alice") != owner_id("https://b.example", "alice")
    assert owner_id("https://a.example", "alice") == owner_id("https://a.example", "alice")


@pytest.mark.parametrize("kind", ["RSA", "EC", "OKP"])
def test_a_static_key_of_each_accepted_algorithm_verifies_its_tokens(
    kind: str, tmp_path: Path
) -> None:
    # Given an issuer configured with a PEM file, and one with the PEM text
    signer = Issuer(0)
    signer.url = ISSUER
    private_key = signer.add_key("k1", kind)
    (tmp_path / "key.pem").write_bytes(public_pem(private_key))
    for value in (str(tmp_path / "key.pem"), public_pem(private_key).decode()):
        config = oauth_config(settings(resource=RESOURCE, auth_keys={ISSUER: value}))
        # When its token is checked, Then it is accepted with the claims' principal
        principal = verify(config, signer.token(RESOURCE, sub="alice", scope="tools:call:lookup"))
        assert principal.tenant == "alice" and principal.tools == frozenset({"lookup"})
        assert principal.owner == owner_id(ISSUER, "alice")


def test_jwks_keys_of_each_algorithm_verify_and_an_unaccepted_one_is_refused(
    issuer: Issuer,
) -> None:
    issuer.add_key("ec", "EC")
    issuer.add_key("ed", "OKP")
    config = oauth_config(
        settings(
            resource=RESOURCE,
            auth_issuers={issuer.url: issuer.jwks_uri},
            auth_algorithms=["ES256", "EdDSA"],
        )
    )
    verifier = TokenVerifier(config)
    for kid in ("ec", "ed"):
        assert anyio.run(verifier.verify, issuer.token(RESOURCE, kid=kid)).tenant == "alice"
    # RS256 is not among this server's algorithms: refused before any key is looked at
    with pytest.raises(AuthRefused) as refused:
        anyio.run(verifier.verify, issuer.token(RESOURCE, kid="k1"))
    assert refused.value.reason is Reason.ALGORITHM_NOT_ALLOWED


def test_an_issuer_whose_keys_cannot_be_fetched_makes_requests_wait_not_pass() -> None:
    # Given an issuer whose JWKS URI answers nothing (a closed port)
    signer = Issuer(0)
    signer.url = ISSUER
    signer.add_key("k1")
    config = oauth_config(
        settings(resource=RESOURCE, auth_issuers={ISSUER: "http://127.0.0.1:1/jwks"})
    )
    # Then its tokens are refused as "keys unavailable" (503), not let through
    with pytest.raises(AuthRefused) as refused:
        verify(config, signer.token(RESOURCE))
    assert refused.value.reason is Reason.KEYS_UNAVAILABLE and refused.value.status == 503


def test_scopes_are_read_from_the_configured_claims(issuer: Issuer) -> None:
    config = oauth_config(
        settings(
            resource=RESOURCE,
            auth_issuers={issuer.url: issuer.jwks_uri},
            scope_claims=["permissions"],
            tenant_claim="org",
        )
    )
    token = issuer.token(RESOURCE, scope=None, permissions=["tools:call:lookup"], org="Acme Inc")
    principal = verify(config, token)
    assert principal.tools == frozenset({"lookup"}) and principal.tenant == tenant_id("Acme Inc")
    # A one-member list is that member (Keycloak's organization claim); a number its digits
    for org, tenant in ((["acme"], "acme"), (4711, "4711")):
        token = issuer.token(RESOURCE, scope=None, permissions=["tools:call"], org=org)
        assert verify(config, token).tenant == tenant
    # The default claims are not read any more; no tenant claim, or an ambiguous one, is refused
    assert refusal(config, issuer.token(RESOURCE, org="acme")) is Reason.INSUFFICIENT_SCOPE
    for org in (None, ["acme", "globex"], True, {"acme": {}}):
        token = issuer.token(RESOURCE, scope=None, permissions=["tools:call"], org=org)
        assert refusal(config, token) is Reason.MISSING_CLAIM


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"auth_issuers": {ISSUER: f"{ISSUER}/certs"}}, "TOOL_BOUNDARY_MCP_RESOURCE"),
        (
            {"resource": "http://mcp.example.com/mcp", "auth_issuers": {ISSUER: f"{ISSUER}/c"}},
            "TOOL_BOUNDARY_MCP_RESOURCE",
        ),
        (
            {"resource": RESOURCE, "auth_issuers": {"http://idp.example.com": f"{ISSUER}/c"}},
            "TOOL_BOUNDARY_MCP_AUTH_ISSUERS",
        ),
        (
            {"resource": f"{RESOURCE}#x", "auth_issuers": {ISSUER: f"{ISSUER}/c"}},
            "TOOL_BOUNDARY_MCP_RESOURCE",
        ),
        (
            {"resource": RESOURCE, "token": "t", "auth_issuers": {ISSUER: f"{ISSUER}/c"}},
            "TOOL_BOUNDARY_MCP_TOKEN",
        ),
        (
            {"resource": RESOURCE, "auth_issuers": {ISSUER: "x"}, "auth_keys": {ISSUER: "y"}},
            "TOOL_BOUNDARY_MCP_AUTH_KEYS",
        ),
        ({"resource": RESOURCE, "auth_keys": {ISSUER: "/no/such.pem"}}, "AUTH_KEYS"),
        ({"resource": RESOURCE, "auth_keys": {ISSUER: "-----BEGIN junk"}}, "AUTH_KEYS"),
    ],
)
def test_bad_oauth_settings_stop_the_server_naming_the_setting(
    fields: dict[str, Any], names: str
) -> None:
    with pytest.raises(ConfigurationError) as error:
        oauth_config(settings(**fields))
    assert names in error.value.problem
    # Values never appear in the message (they may hold URLs)
    assert "idp.example.com" not in error.value.problem


@pytest.mark.parametrize("algorithms", [["HS256"], ["none"], ["RS256", "HS512"], []])
def test_only_asymmetric_algorithms_can_be_configured(algorithms: list[str]) -> None:
    with pytest.raises(ValidationError):
        settings(auth_algorithms=algorithms)


def test_with_issuers_the_server_may_bind_off_loopback_without_a_static_token() -> None:
    oauth = settings(resource=RESOURCE, auth_issuers={ISSUER: f"{ISSUER}/certs"})
    assert check_binding("0.0.0.0", oauth) is None
    with pytest.raises(ConfigurationError) as error:
        check_binding("0.0.0.0", settings())
    assert "TOOL_BOUNDARY_MCP_AUTH_ISSUERS" in error.value.problem


def test_the_first_requester_owns_the_run_and_its_tenant_goes_into_the_runs_context(
    boundary: ToolBoundary,
) -> None:
    # Given an open run without a tenant
    assert boundary.open_run(RUN).is_open
    calls = BoundaryCalls(boundary)
    alice = Principal(
        owner=owner_id(ISSUER, "Alice Smith"), tenant=tenant_id("Alice Smith"), tools=None
    )
    bob = Principal(owner=owner_id(ISSUER, "bob"), tenant="bob", tools=None)
    # When alice uses it, then bob
    run = anyio.run(calls.get_run, RUN_ID, alice)
    refused = anyio.run(calls.get_run, RUN_ID, bob)
    # Then alice's calls carry her tenant, and bob is told the run does not exist
    assert isinstance(run, RunContext) and run.tenant == tenant_id("Alice Smith")
    assert refused is ErrorCode.RUN_NOT_FOUND
    # And the run's stored policy is unchanged (the tenant is the caller's, per call)
    stored = boundary.get_run(RUN_ID)
    assert stored is not None and stored.tenant is None


class FlakyIssuer:
    """A JWKS source for ``JwksKeys`` with a clock the test moves: it serves ``document`` or,
    once ``down``, fails after ``outage_s`` of (fake) waiting, as a timed-out fetch does."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.now = 1000.0
        self.down = False
        self.outage_s = 10.0
        self.fetches = 0

    def clock(self) -> float:
        return self.now

    async def fetch(self, uri: str) -> Any:
        self.fetches += 1
        await anyio.sleep(0.01)  # the others queue meanwhile
        if self.down:
            self.now += self.outage_s
            raise TimeoutError
        return self.document


def test_an_issuer_outage_keeps_the_last_keys_and_queued_requests_do_not_refetch(
    issuer: Issuer,
) -> None:
    # Given keys fetched once
    source = FlakyIssuer(issuer.jwks())
    keys = JwksKeys(
        issuer.jwks_uri,
        algorithms=("RS256",),
        ttl_s=300,
        refresh_s=30,
        fetch=source.fetch,
        clock=source.clock,
    )
    assert anyio.run(keys.key, "k1", "RS256").algorithm == "RS256"
    # When the TTL has passed, the issuer is down and many requests arrive together
    source.now += 301
    source.down = True

    async def together() -> list[str]:
        found: list[str] = []

        async def one() -> None:
            found.append((await keys.key("k1", "RS256")).algorithm)

        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(one)
        return found

    found = anyio.run(together)
    # Then one fetch was tried, and every request was served from the last good keys
    assert source.fetches == 2
    assert found == ["RS256"] * 10
