"""A local OAuth issuer for the MCP authorization tests: keys made in the test, a JWKS (and
authorization server metadata) served over real HTTP on a port of the test range, tokens
signed with PyJWT. The JWKS can be rotated and counts how often it was fetched."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.support.servers import free_port, release_port

#: Algorithm of each key kind the issuer can make.
ALGORITHMS = {"RSA": "RS256", "EC": "ES256", "OKP": "EdDSA"}


def new_private_key(kind: str = "RSA") -> Any:
    if kind == "RSA":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "EC":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def public_pem(private_key: Any) -> bytes:
    return bytes(
        private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(claims: dict[str, Any]) -> str:
    """An ``alg: none`` token (no signature)."""
    header = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    return f"{header}.{_b64(json.dumps(claims).encode())}."


def hmac_token(claims: dict[str, Any], secret: bytes, kid: str | None = None) -> str:
    """An HS256 token whose secret is ``secret`` (the attack: the issuer's public key as an
    HMAC secret). Made by hand: PyJWT rightly refuses a PEM key as an HMAC secret."""
    fields: dict[str, Any] = {"alg": "HS256", "typ": "JWT"}
    if kid is not None:
        fields["kid"] = kid
    signing_input = f"{_b64(json.dumps(fields).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


class Issuer:
    """Keys by kid, the published JWKS, and tokens for one resource."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.jwks_uri = f"{self.url}/jwks"
        self.keys: dict[str, Any] = {}
        self.published: list[str] = []
        self.jwks_fetches = 0
        self._lock = threading.Lock()

    def add_key(self, kid: str, kind: str = "RSA", *, publish: bool = True) -> Any:
        self.keys[kid] = new_private_key(kind)
        if publish:
            self.published.append(kid)
        return self.keys[kid]

    def publish(self, *kids: str) -> None:
        """The JWKS from now on holds exactly these keys."""
        self.published = list(kids)

    def jwks(self) -> dict[str, Any]:
        entries = []
        for kid in self.published:
            private_key = self.keys[kid]
            algorithm = jwt.get_algorithm_by_name(_algorithm(private_key))
            entry = json.loads(algorithm.to_jwk(private_key.public_key()))
            entries.append({**entry, "kid": kid, "use": "sig"})
        return {"keys": entries}

    def claims(self, resource: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.url,
            "aud": [resource, "account"],
            "sub": "alice",
            "iat": now,
            "exp": now + 300,
            "scope": "openid tools:call",
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def token(self, resource: str, kid: str = "k1", **overrides: Any) -> str:
        private_key = self.keys[kid]
        return jwt.encode(
            self.claims(resource, **overrides),
            private_key,
            algorithm=_algorithm(private_key),
            headers={"kid": kid},
        )

    def metadata(self) -> dict[str, Any]:
        """RFC 8414 authorization server metadata (for clients that start an authorization)."""
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "jwks_uri": self.jwks_uri,
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "code_challenge_methods_supported": ["S256"],
        }

    def answer(self, path: str) -> dict[str, Any] | None:
        if path == "/jwks":
            with self._lock:
                self.jwks_fetches += 1
            return self.jwks()
        if path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
            return self.metadata()
        return None


def _algorithm(private_key: Any) -> str:
    if isinstance(private_key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(private_key, ec.EllipticCurvePrivateKey):
        return "ES256"
    return "EdDSA"


@contextmanager
def serving_issuer() -> Iterator[Issuer]:
    """An issuer with key ``k1`` (RSA) published, served until the block ends."""
    port = free_port()
    issuer = Issuer(port)
    issuer.add_key("k1")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            document = issuer.answer(self.path)
            body = json.dumps(document).encode() if document is not None else b"{}"
            self.send_response(200 if document is not None else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        release_port(port)
