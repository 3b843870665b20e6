"""What the server adds to the SDK's wire, on every transport: ``server/discover`` and the
``-32022`` (unsupported protocol version) error name every revision the endpoint serves, not
only the per-request-envelope ones (the SDK's default); and over HTTP, a 2025-11-25 event
stream opens with a priming event, an event id and a ``retry`` field (SEP-1699)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from types import TracebackType
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    MODERN_PROTOCOL_VERSIONS,
    is_version_at_least,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Every revision this endpoint serves: those of the ``initialize`` handshake (2024-11-05 to
#: 2025-11-25) and those of the per-request envelope (2026-07-28), oldest first.
SERVED_VERSIONS: tuple[str, ...] = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
#: The first revision whose event streams are primed (SEP-1699: older clients cannot parse an
#: event without data).
PRIMED_SINCE = "2025-11-25"
_ALLOW_POST = [(b"allow", b"POST")]
#: The ``retry`` a primed stream suggests: how long a client waits before it reconnects, ms.
SSE_RETRY_MS = 1000


def served_supported(data: Any) -> Any:
    """A ``-32022`` error's data with ``supported`` naming every revision served."""
    if isinstance(data, dict) and "supported" in data:
        return {**data, "supported": list(SERVED_VERSIONS)}
    return data


def discover_handler(server: Server[Any]) -> Any:
    """``server/discover``, as the SDK answers it, but ``supportedVersions`` names every
    revision served (a client that does not speak 2026-07-28 learns it may initialize)."""

    async def discover(
        ctx: ServerRequestContext[Any, Any], params: types.RequestParams | None
    ) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(SERVED_VERSIONS),
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )

    return discover


class ServedVersionsWriter:
    """The stdio write stream, with ``-32022`` errors naming every revision served."""

    def __init__(self, inner: Any) -> None:
        #: The transport's write stream (the SDK's ``WriteStream[SessionMessage]``).
        self.inner = inner

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if isinstance(message, types.JSONRPCError):
            error = message.error
            if error.code == UNSUPPORTED_PROTOCOL_VERSION:
                error = error.model_copy(update={"data": served_supported(error.data)})
                item = dataclasses.replace(
                    item, message=message.model_copy(update={"error": error})
                )
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> ServedVersionsWriter:
        await self.inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        suppressed: bool | None = await self.inner.__aexit__(exc_type, exc_val, exc_tb)
        return suppressed


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _primes(version: str | None) -> bool:
    return (
        version is not None
        and version not in MODERN_PROTOCOL_VERSIONS
        and is_version_at_least(version, PRIMED_SINCE)
    )


def priming_event() -> bytes:
    """An event with an id, a ``retry`` and no data: the SDK's priming event, one id per
    stream (random: it names nothing of the call)."""
    return f"id: {uuid.uuid4().hex}\r\nretry: {SSE_RETRY_MS}\r\ndata: \r\n\r\n".encode()


class WireGuard:
    """ASGI middleware over the SDK's streamable HTTP app: primes a 2025-11-25 event stream,
    and names every revision served in a ``-32022`` answer (the SDK names only 2026-07-28).

    A stream cannot be resumed (stateless HTTP: no process keeps it): a ``GET`` with
    ``Last-Event-ID`` is answered ``405``, so a client that lost a stream gives up after
    ``retry`` and asks again (a task by its id, a call by the agent's id).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "GET" and _header(scope, b"last-event-id") is not None:
            # A client resuming a stream it lost: no process keeps a stateless stream, so
            # the transport's answer for "no stream here" (the SDK's would be a 500).
            await send({"type": "http.response.start", "status": 405, "headers": _ALLOW_POST})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        version = _header(scope, b"mcp-protocol-version")
        if version is None:
            # The handshake names its revision in the body only: read it, then replay it.
            body, receive = await _buffered(receive)
            version = _initialize_version(body)
        await self.app(scope, receive, _Responder(send, prime=_primes(version)).send)


class _Responder:
    """Rewrites one response as it is sent: a priming event first on an event stream; a
    ``400`` JSON body with ``-32022`` held until complete and rewritten."""

    def __init__(self, send: Send, *, prime: bool) -> None:
        self._send = send
        self._prime = prime
        self._held: Message | None = None
        self._body = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            content_type = _content_type(message)
            if message.get("status") == 400 and content_type == "application/json":
                self._held = message
                return
            await self._send(message)
            if self._prime and content_type == "text/event-stream":
                primer = {"type": "http.response.body", "body": priming_event(), "more_body": True}
                await self._send(primer)
            return
        if self._held is not None and message["type"] == "http.response.body":
            self._body += message.get("body", b"")
            if message.get("more_body", False):
                return
            start, body = self._held, _served_error(self._body)
            self._held = None
            headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await self._send({**start, "headers": headers})
            await self._send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await self._send(message)


def _content_type(start: Message) -> str:
    for key, value in start.get("headers", []):
        if key.lower() == b"content-type":
            return str(value.decode("latin-1").partition(";")[0].strip().lower())
    return ""


def _served_error(body: bytes) -> bytes:
    try:
        decoded = json.loads(body)
    except ValueError:
        return body
    error = decoded.get("error") if isinstance(decoded, dict) else None
    if not isinstance(error, dict) or error.get("code") != UNSUPPORTED_PROTOCOL_VERSION:
        return body
    error["data"] = served_supported(error.get("data"))
    return json.dumps(decoded, separators=(",", ":")).encode()


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The request's body, and a ``receive`` that gives it again, then the rest."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def again() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, again


def _initialize_version(body: bytes) -> str | None:
    """The revision an ``initialize`` request proposes, else ``None``."""
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    if not isinstance(decoded, dict) or decoded.get("method") != "initialize":
        return None
    params = decoded.get("params")
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    return version if isinstance(version, str) else None
