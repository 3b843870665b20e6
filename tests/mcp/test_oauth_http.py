"""``tool-boundary mcp --transport http`` as an OAuth resource server, over real HTTP: a local
issuer (keys made here, its JWKS served on a port of the test range) and a real server
process. Every request is checked; a refusal is the RFC 9728 challenge (or 403
``insufficient_scope``), a fixed body and one log line with a reason code, never the token."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from boundary import RunContext
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tests.mcp.conftest import RUN_ID
from tests.mcp.issuer import Issuer, hmac_token, public_pem, serving_issuer, unsigned_token
from tests.mcp.servers import HttpServer, http_client, oauth_server, stdio_client


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with serving_issuer() as served:
        yield served


@pytest.fixture(scope="module")
def guarded(logs: Path, issuer: Issuer) -> Iterator[HttpServer]:
    with oauth_server(
        logs / "oauth.log",
        {issuer.url: issuer.jwks_uri},
        TOOL_BOUNDARY_MCP_AUTH_LEEWAY_S="30",
        TOOL_BOUNDARY_MCP_JWKS_REFRESH_S="3600",
    ) as server:
        yield server


def post(url: str, token: str | None = None) -> httpx2.Response:
    """A raw ``tools/list`` POST, with ``Authorization: Bearer <token>`` when given."""
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    with httpx2.Client(timeout=30) as client:
        return client.post(url, json=body, headers=headers)


def challenge(response: httpx2.Response) -> dict[str, str]:
    """The ``WWW-Authenticate: Bearer`` parameters."""
    scheme, _, rest = response.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer"
    params = {}
    for part in rest.split(", "):
        name, _, value = part.partition("=")
        params[name] = value.strip('"')
    return params


def refusals(server: HttpServer) -> list[str]:
    """The reason codes of the server's refusal lines so far, in order."""
    prefix = "MCP request refused: "
    text = server.log.read_text(errors="replace")
    return [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]


def metadata_url(server: HttpServer) -> str:
    return f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp"


def test_a_request_without_a_token_gets_the_challenge_pointing_at_the_metadata(
    guarded: HttpServer, issuer: Issuer
) -> None:
    # When a request comes without a token
    refused = post(guarded.url)
    # Then it is 401 with the RFC 9728 challenge, a fixed body, and one log line
    assert refused.status_code == 401
    assert refused.json() == {"error": "unauthorized"}
    params = challenge(refused)
    assert params["resource_metadata"] == metadata_url(guarded)
    assert params["scope"] == "tools:call"
    assert refusals(guarded)[-1] == "missing_token"
    # And the document it points to names the resource, its issuer and the scopes
    with httpx2.Client(timeout=30) as client:
        document = client.get(params["resource_metadata"]).json()
        at_root = client.get(
            f"http://127.0.0.1:{guarded.port}/.well-known/oauth-protected-resource"
        )
    assert document["resource"] == guarded.url
    assert document["authorization_servers"] == [issuer.url]
    assert document["scopes_supported"][0] == "tools:call"
    assert {"tools:call:lookup", "tools:call:sleepy"} <= set(document["scopes_supported"])
    assert "tools:call:writer" not in document["scopes_supported"]  # not read-only: not served
    assert at_root.json() == document


def test_a_valid_token_is_served_and_one_in_the_leeway_too(
    guarded: HttpServer, issuer: Issuer, opened_run: RunContext
) -> None:
    # Given a valid token, and one that expired 10 s ago (the leeway is 30 s)
    valid = issuer.token(guarded.url)
    late = issuer.token(guarded.url, exp=issuer.claims(guarded.url)["iat"] - 10)

    async def scenario(token: str, call_id: str) -> Any:
        async with http_client(guarded.url, token=token) as client:
            listing = await client.list_tools()
            result = await client.call_tool(
                "lookup", {"query": "x"}, meta={RUN_ID_META: RUN_ID, TOOL_CALL_ID_META: call_id}
            )
            return {tool.name for tool in listing.tools}, result

    for token, call_id in ((valid, "call-valid"), (late, "call-late")):
        names, result = anyio.run(scenario, token, call_id)
        # Then every read-only tool is listed and a call answers READY
        assert {"lookup", "sleepy"} <= names
        assert result.is_error is False and result.structured_content["status"] == "READY"


#: Tokens the server must refuse, and the reason code each one is logged with.
BAD_TOKENS = {
    "expired": "expired",
    "not yet valid": "not_yet_valid",
    "wrong audience": "wrong_audience",
    "no audience": "missing_claim",
    "no expiry": "missing_claim",
    "untrusted issuer": "unknown_issuer",
    "trusted issuer, another key": "bad_signature",
    "alg none": "algorithm_not_allowed",
    "HS256 with the public key": "algorithm_not_allowed",
    "no subject": "missing_claim",
    "garbage": "malformed_token",
}


def bad_token(case: str, issuer: Issuer, resource: str) -> str:
    now = int(time.time())
    claims = issuer.claims(resource)
    if case in ("untrusted issuer", "trusted issuer, another key"):
        # Another issuer (URL and key), or one that claims the trusted URL with its own key
        other = Issuer(issuer.port)
        if case == "untrusted issuer":
            other.url = "http://127.0.0.1:1/other"
        other.add_key("k1")
        return other.token(resource)
    tokens = {
        "expired": lambda: issuer.token(resource, exp=now - 120),
        "not yet valid": lambda: issuer.token(resource, nbf=now + 600),
        "wrong audience": lambda: issuer.token(resource, aud="http://127.0.0.1:1/mcp"),
        "no audience": lambda: issuer.token(resource, aud=None),
        "no expiry": lambda: issuer.token(resource, exp=None),
        "alg none": lambda: unsigned_token(claims),
        "HS256 with the public key": lambda: hmac_token(
            claims, public_pem(issuer.keys["k1"]), kid="k1"
        ),
        "no subject": lambda: issuer.token(resource, sub=None),
        "garbage": lambda: "not.a.jwt",
    }
    return tokens[case]()


@pytest.mark.parametrize("case", list(BAD_TOKENS))
def test_a_bad_token_is_refused_with_the_challenge_and_its_reason_logged(
    guarded: HttpServer, issuer: Issuer, case: str
) -> None:
    # When the request carries the bad token
    refused = post(guarded.url, bad_token(case, issuer, guarded.url))
    # Then it is 401 invalid_token with the challenge and a fixed body; the log says why
    assert refused.status_code == 401
    assert refused.json() == {"error": "invalid_token"}
    params = challenge(refused)
    assert params["error"] == "invalid_token"
    assert params["resource_metadata"] == metadata_url(guarded)
    assert refusals(guarded)[-1] == BAD_TOKENS[case]


def test_a_token_without_a_tool_scope_gets_403_naming_the_scope(
    guarded: HttpServer, issuer: Issuer
) -> None:
    # When a valid token carries no tool scope
    refused = post(guarded.url, issuer.token(guarded.url, scope="openid profile"))
    # Then it is 403 insufficient_scope naming the scope to ask for, with the metadata
    assert refused.status_code == 403
    assert refused.json() == {"error": "insufficient_scope", "scope": "tools:call"}
    params = challenge(refused)
    assert params == {
        "error": "insufficient_scope",
        "scope": "tools:call",
        "resource_metadata": metadata_url(guarded),
    }
    assert refusals(guarded)[-1] == "insufficient_scope"


def test_an_unknown_kid_refetches_the_jwks_once_and_a_flood_of_them_does_not(
    logs: Path, opened_run: RunContext
) -> None:
    with (
        serving_issuer() as issuer,
        oauth_server(
            logs / "rotation.log",
            {issuer.url: issuer.jwks_uri},
            TOOL_BOUNDARY_MCP_JWKS_REFRESH_S="3600",
        ) as server,
    ):
        # Given a server that fetched the issuer's keys once
        assert post(server.url, issuer.token(server.url)).status_code == 200
        assert issuer.jwks_fetches == 1
        # When the issuer rotates to a new key and a token signed with it arrives
        issuer.add_key("k2", publish=False)
        issuer.publish("k2")
        rotated = post(server.url, issuer.token(server.url, kid="k2"))
        # Then the server fetched the keys again and accepts it
        assert rotated.status_code == 200
        assert issuer.jwks_fetches == 2
        # When tokens naming made-up kids flood in
        for number in range(20):
            issuer.add_key(f"made-up-{number}", publish=False)
            flood = post(server.url, issuer.token(server.url, kid=f"made-up-{number}"))
            assert flood.status_code == 401
        # Then each is refused as an unknown key and the issuer was not asked again
        assert refusals(server)[-20:] == ["unknown_key"] * 20
        assert issuer.jwks_fetches == 2
        # And the rotated key still works from the cache
        assert post(server.url, issuer.token(server.url, kid="k2")).status_code == 200
        assert issuer.jwks_fetches == 2


def test_no_token_reaches_the_servers_output(
    guarded: HttpServer, issuer: Issuer, opened_run: RunContext
) -> None:
    # Given tokens carrying a planted marker, served and refused in every way
    marker = "planted-3b9f61c2"
    good = issuer.token(guarded.url, jti=marker)
    cases = [
        good,
        issuer.token(guarded.url, jti=marker, scope="openid"),
        issuer.token(guarded.url, jti=marker, exp=1),
        issuer.token(guarded.url, jti=marker, aud="http://127.0.0.1:1/mcp"),
        unsigned_token(issuer.claims(guarded.url, jti=marker)),
        f"{good}x",
        marker,
    ]
    statuses = [post(guarded.url, token).status_code for token in cases]
    assert statuses == [200, 403, 401, 401, 401, 401, 401]
    # Then the server's whole output holds no token, no signature, no claim of one
    output = guarded.log.read_text(errors="replace")
    assert "MCP request refused" in output  # the output was captured
    for token in cases:
        assert token not in output
    for signature in {token.split(".")[-1] for token in cases if token.count(".") == 2}:
        assert not signature or signature not in output
    assert marker not in output


def test_stdio_takes_no_token_even_with_issuers_configured() -> None:
    # Given issuer settings that HTTP would need a canonical URI for (none is set)
    issuers = '{"https://idp.example.com": "https://idp.example.com/jwks"}'

    async def scenario() -> set[str]:
        async with stdio_client(TOOL_BOUNDARY_MCP_AUTH_ISSUERS=issuers) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    # Then stdio ignores them: its credentials are its environment (the authorization profile)
    assert {"lookup", "sleepy"} <= anyio.run(scenario)
