"""The resource server's HTTP side: every request but the metadata document needs a bearer
token the verifier accepts; a refused one gets the RFC 9728 challenge (401), or 403
``insufficient_scope`` naming the scope, a fixed body, and one log line with the reason code.
The token is never logged, echoed or kept."""

from __future__ import annotations

import json
import logging
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from tasks.mcp_server.oauth.config import METADATA_PATH, OAuthConfig
from tasks.mcp_server.oauth.errors import AuthRefused, Reason
from tasks.mcp_server.oauth.principal import CALL_ANY_SCOPE, CALL_ONE_PREFIX, PRINCIPAL_KEY
from tasks.mcp_server.oauth.tokens import TokenVerifier

logger = logging.getLogger(__name__)

#: Longest token read, characters (beyond it: ``malformed_token``).
MAX_TOKEN_CHARS = 16 * 1024
#: RFC 6750's b64token.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")

_BODIES = {
    Reason.MISSING_TOKEN: b'{"error":"unauthorized"}',
    Reason.INSUFFICIENT_SCOPE: json.dumps(
        {"error": "insufficient_scope", "scope": CALL_ANY_SCOPE}, separators=(",", ":")
    ).encode(),
    Reason.KEYS_UNAVAILABLE: b'{"error":"temporarily_unavailable"}',
}
_INVALID_BODY = b'{"error":"invalid_token"}'
_ERROR_BODY = b'{"error":"server_error"}'


def protected_resource_metadata(config: OAuthConfig) -> dict[str, object]:
    """The RFC 9728 document: the resource, its issuers and the scopes it understands."""
    return {
        "resource": config.resource,
        "authorization_servers": config.issuers,
        "scopes_supported": [
            CALL_ANY_SCOPE,
            *(f"{CALL_ONE_PREFIX}{name}" for name in config.tool_names),
        ],
        "bearer_methods_supported": ["header"],
        "resource_name": "tool-boundary",
    }


def _bearer(scope: Scope) -> str:
    """The request's bearer token.

    Raises:
        AuthRefused: none (``MISSING_TOKEN``), or not one well-formed bearer token.
    """
    values: list[bytes] = [
        value for name, value in scope.get("headers", []) if name == b"authorization"
    ]
    if not values:
        raise AuthRefused(Reason.MISSING_TOKEN)
    text: str = values[0].decode("latin-1")
    scheme, _, token = text.partition(" ")
    token = token.strip()
    if (
        len(values) > 1
        or scheme.lower() != "bearer"
        or len(token) > MAX_TOKEN_CHARS
        or _B64TOKEN.fullmatch(token) is None
    ):
        raise AuthRefused(Reason.MALFORMED_TOKEN)
    return token


class OAuthGuard:
    """ASGI middleware in front of the MCP app: serves the metadata document, checks every
    other HTTP request's token and hands the app its ``Principal`` (``PRINCIPAL_KEY``)."""

    def __init__(self, app: ASGIApp, config: OAuthConfig, verifier: TokenVerifier) -> None:
        self.app = app
        self.verifier = verifier
        self._metadata = json.dumps(protected_resource_metadata(config)).encode()
        self._metadata_paths = {METADATA_PATH, f"{METADATA_PATH}{config.resource_path}"}
        self._metadata_param = f'resource_metadata="{config.metadata_url}"'

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in self._metadata_paths:
            await self._send_metadata(scope, send)
            return
        try:
            principal = await self.verifier.verify(_bearer(scope))
        except AuthRefused as refused:
            logger.warning("MCP request refused: %s", refused.reason.value)
            await self._refuse(send, refused)
            return
        except Exception as exc:
            logger.error("MCP token check failed: %s", type(exc).__name__)
            await _send(send, 500, _ERROR_BODY, [])
            return
        await self.app({**scope, PRINCIPAL_KEY: principal}, receive, send)

    async def _send_metadata(self, scope: Scope, send: Send) -> None:
        if scope["method"] != "GET":
            await _send(send, 405, b'{"error":"method_not_allowed"}', [(b"allow", b"GET")])
            return
        # Public and the same for everyone: any origin may read it (browser-based clients).
        headers = [(b"access-control-allow-origin", b"*"), (b"cache-control", b"max-age=300")]
        await _send(send, 200, self._metadata, headers)

    async def _refuse(self, send: Send, refused: AuthRefused) -> None:
        reason = refused.reason
        if refused.status == 503:
            await _send(send, 503, _BODIES[reason], [(b"retry-after", b"5")])
            return
        if reason is Reason.MISSING_TOKEN:
            # RFC 6750: a request without credentials gets no error code.
            challenge = f'Bearer {self._metadata_param}, scope="{CALL_ANY_SCOPE}"'
        elif refused.status == 403:
            challenge = (
                f'Bearer error="insufficient_scope", scope="{CALL_ANY_SCOPE}", '
                f"{self._metadata_param}"
            )
        else:
            challenge = f'Bearer error="invalid_token", {self._metadata_param}'
        body = _BODIES.get(reason, _INVALID_BODY)
        await _send(send, refused.status, body, [(b"www-authenticate", challenge.encode())])


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
