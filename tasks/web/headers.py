"""The security headers of every answer of the web view: pages, stylesheet, script, live
stream, a 401, a login redirect and a 500 alike.

The pages load only their own stylesheet and script (no inline script, no inline style): the
Content-Security-Policy allows nothing else, and no page may be framed (``frame-ancestors
'none'`` and ``X-Frame-Options: DENY``: a page of another origin cannot put the Cancel buttons
under a user's click).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Only the server's own script, stylesheet and live stream; no frame, plugin or base URL.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
_NAMES = {name for name, _ in SECURITY_HEADERS}


class SecurityHeaders:
    """Adds ``SECURITY_HEADERS`` to every HTTP answer (replacing any of the same name)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() not in _NAMES
                ]
                message = {**message, "headers": [*headers, *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)
