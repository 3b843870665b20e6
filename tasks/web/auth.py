"""Who may read the web view: a token, when one is set (``TOOL_BOUNDARY_WEB_TOKEN``).

A request passes with ``Authorization: Bearer <token>``, with the session cookie, or with
``?token=<token>`` in its URL (a login link): that one is answered with the cookie and a
redirect to the same URL without the token, so the token does not stay in the address bar or
the history. The cookie holds a value derived from the token, never the token itself. Every
comparison is in constant time; a refused request is answered 401 and echoed nowhere.

Forms that change something (cancel) carry a CSRF token: an HMAC of what the form does under
a key made when the server starts, checked on POST.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

#: The session cookie's name.
COOKIE = "tb_web_session"
#: The login link's query parameter.
TOKEN_PARAM = "token"  # noqa: S105 (a parameter name, not a secret)

_REFUSED = (
    b"<!doctype html><title>401 Unauthorized</title>"
    b"<h1>401 Unauthorized</h1><p>This web view needs its token: open it with "
    b"<code>?token=...</code> (the value of TOOL_BOUNDARY_WEB_TOKEN), or send "
    b"<code>Authorization: Bearer ...</code>.</p>"
)


def session_value(token: str) -> str:
    return hmac.new(token.encode(), b"tool-boundary-web-session", hashlib.sha256).hexdigest()


class TokenGuard:
    """Answers 401 to any HTTP request that brings neither the token nor the session cookie."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._bearer = f"Bearer {token}".encode()
        self._token = token.encode()
        self._session = session_value(token).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        if self._by_header(headers) or self._by_cookie(headers):
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in query if k == TOKEN_PARAM]
        if given and hmac.compare_digest(given[0].encode(), self._token):
            await self._login(scope, query, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"www-authenticate", b'Bearer realm="tool-boundary"'),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _REFUSED})

    def _by_header(self, headers: dict[bytes, bytes]) -> bool:
        value = headers.get(b"authorization")
        return value is not None and hmac.compare_digest(value, self._bearer)

    def _by_cookie(self, headers: dict[bytes, bytes]) -> bool:
        raw = headers.get(b"cookie")
        if raw is None:
            return False
        cookie = SimpleCookie()
        try:
            cookie.load(raw.decode("latin-1"))
        except Exception:
            return False
        morsel = cookie.get(COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self._session)

    async def _login(self, scope: Scope, query: list[tuple[str, str]], send: Send) -> None:
        rest = urlencode([(k, v) for k, v in query if k != TOKEN_PARAM])
        location = local_path(scope.get("path", "/")) + (f"?{rest}" if rest else "")
        cookie = f"{COOKIE}={self._session.decode()}; Path=/; HttpOnly; SameSite=Strict"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1", errors="replace")),
                    (b"set-cookie", cookie.encode()),
                    (b"cache-control", b"no-store"),
                    (b"referrer-policy", b"no-referrer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def local_path(path: str) -> str:
    """``path`` as a redirect that stays on this server: percent-encoded again (a decoded CR,
    LF, space or backslash cannot reach the header), one leading slash (``//host/`` would be
    another server)."""
    quoted = quote(path, safe="/:@!$&'()*+,;=-._~")
    return "/" + quoted.lstrip("/")


class Csrf:
    """CSRF tokens of this server process: an HMAC of the action under a random key."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def token(self, action: str) -> str:
        return hmac.new(self._key, action.encode(), hashlib.sha256).hexdigest()

    def valid(self, action: str, given: str) -> bool:
        return hmac.compare_digest(self.token(action).encode(), given.encode())
