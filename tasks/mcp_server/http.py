"""Streamable HTTP: the SDK's app (stateless, so any server process answers any request; each
POST answered on an event stream), behind a bearer token check (one static token, or OAuth
access tokens from trusted issuers: ``tasks.mcp_server.oauth``), served by uvicorn."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

import uvicorn
from mcp.server.lowlevel import Server
from starlette.types import ASGIApp, Receive, Scope, Send

from tasks.mcp_server.wire import WireGuard

if TYPE_CHECKING:
    from tasks.mcp_server.oauth.config import OAuthConfig

#: The MCP endpoint's path.
MCP_PATH = "/mcp"


class BearerTokenGuard:
    """Answers 401 to any HTTP request without ``Authorization: Bearer <token>``.

    The token is compared in constant time and never logged; a refused request is not
    echoed either.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="tool-boundary"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                return hmac.compare_digest(value, self._expected)
        return False


def http_app(
    server: Server[Any], *, host: str, token: str | None, oauth: OAuthConfig | None = None
) -> ASGIApp:
    """The ASGI app: stateless (no session lives in one process); each POST is answered on its
    own event stream, so the request's notifications (``notifications/progress`` that keep a
    long plain call alive) reach the client before the answer; a 2025-11-25 stream opens with
    a priming event, and ``-32022`` names every revision served (``wire.WireGuard``)."""
    app: ASGIApp = WireGuard(
        server.streamable_http_app(
            streamable_http_path=MCP_PATH, stateless_http=True, json_response=False, host=host
        )
    )
    if oauth is not None:
        from tasks.mcp_server.oauth.guard import OAuthGuard
        from tasks.mcp_server.oauth.tokens import TokenVerifier

        return OAuthGuard(app, oauth, TokenVerifier(oauth))
    return BearerTokenGuard(app, token) if token else app


def run_http(
    server: Server[Any],
    *,
    host: str,
    port: int,
    token: str | None,
    oauth: OAuthConfig | None = None,
) -> None:
    """Serves until SIGINT/SIGTERM. Access logs name paths only, never headers."""
    config = uvicorn.Config(
        http_app(server, host=host, token=token, oauth=oauth),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
    )
    uvicorn.Server(config).run()
