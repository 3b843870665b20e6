"""What the server says about its wire, on real server processes: ``server/discover`` and the
``-32022`` error name every revision the endpoint serves (2025-11-25 as well as 2026-07-28), so
a client without a common envelope revision learns it may initialize; a 2025-11-25 event stream
opens with a priming event: an event id and a ``retry`` field, no data (SEP-1699)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ClientMessageMetadata

from tests.mcp.servers import HttpServer, http_client, stdio_client

#: Revisions the endpoint serves that every answer naming them must include.
SERVED = {"2025-11-25", "2026-07-28"}


def events(body: str) -> list[dict[str, str]]:
    """The SSE events of a response body, each as its fields."""
    parsed = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        if fields:
            parsed.append(fields)
    return parsed


def post(server: HttpServer, body: dict[str, Any], version: str | None) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream"}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    return httpx2.post(server.url, json=body, headers=headers, timeout=30)


def test_discover_over_http_names_every_revision_served(server_a: HttpServer) -> None:
    async def scenario() -> tuple[types.DiscoverResult, MCPError]:
        async with http_client(server_a.url, mode="2026-07-28") as client:
            found = types.DiscoverResult.model_validate(
                await client.session.send_discover("2026-07-28")
            )
            with pytest.raises(MCPError) as unsupported:
                await client.session.send_discover("2099-01-01")
        return found, unsupported.value

    found, unsupported = anyio.run(scenario)
    assert set(found.supported_versions) >= SERVED
    # The registry never changes while the server runs: no tools/list_changed is promised
    assert found.capabilities.tools is not None and not found.capabilities.tools.list_changed
    assert unsupported.code == -32022
    assert set(unsupported.error.data["supported"]) >= SERVED
    assert unsupported.error.data["requested"] == "2099-01-01"


def test_discover_over_stdio_names_every_revision_served() -> None:
    async def scenario() -> tuple[list[str], MCPError]:
        async with stdio_client() as client:
            found = types.DiscoverResult.model_validate(
                await client.session.send_discover("2026-07-28")
            )
            with pytest.raises(MCPError) as unsupported:
                await client.session.send_discover("2099-01-01")
        return found.supported_versions, unsupported.value

    supported, unsupported = anyio.run(scenario)
    assert set(supported) >= SERVED
    assert unsupported.code == -32022
    assert set(unsupported.error.data["supported"]) >= SERVED


def test_a_2025_11_25_event_stream_opens_with_a_priming_event(server_a: HttpServer) -> None:
    # Given a 2025-11-25 request and the handshake that names that revision in its body
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    handshake = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "wire-test", "version": "0"},
        },
    }

    for body, version in ((listing, "2025-11-25"), (handshake, None)):
        # When each is answered on an event stream
        response = post(server_a, body, version)
        assert response.headers["content-type"].startswith("text/event-stream")
        first, *rest = events(response.text)

        # Then its first event primes it: an id, a retry, no data; the answer follows
        assert first["id"] and int(first["retry"]) > 0 and first["data"] == ""
        answer = json.loads(rest[-1]["data"])
        assert answer["id"] == body["id"] and "result" in answer


def test_a_stream_of_an_older_revision_is_not_primed(server_a: HttpServer) -> None:
    # A client before 2025-11-25 may not parse an event without data (the SDK's rule too)
    response = post(
        server_a, {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, "2025-06-18"
    )
    first = events(response.text)[0]
    assert "id" not in first and "retry" not in first
    assert json.loads(first["data"])["id"] == 1


def test_the_sdk_client_gets_the_priming_event_id_as_its_resumption_token(
    server_a: HttpServer,
) -> None:
    async def scenario() -> tuple[list[str], types.ListToolsResult]:
        tokens: list[str] = []

        async def remember(token: str) -> None:
            tokens.append(token)

        async with http_client(server_a.url, mode="legacy") as client:
            assert client.protocol_version == "2025-11-25"
            listed = await client.session.send_request(
                types.ListToolsRequest(),
                types.ListToolsResult,
                metadata=ClientMessageMetadata(on_resumption_token_update=remember),
            )
        return tokens, listed

    tokens, listed = anyio.run(scenario)
    assert listed.tools
    # The priming event's id, then kept for the answer (an SSE stream's last event id)
    assert tokens and tokens[0] and set(tokens) == {tokens[0]}


def test_a_lost_stream_asked_back_is_answered_405_not_500(server_a: HttpServer) -> None:
    # Given a client that lost a primed stream and reconnects with its last event id
    headers = {
        "Accept": "text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
        "Last-Event-ID": "0123abcd",
    }

    # When it asks for the stream back
    response = httpx2.get(server_a.url, headers=headers, timeout=30)

    # Then the stateless server says it keeps no stream (the transport's 405), not a 500
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
