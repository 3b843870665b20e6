"""A minimal Redis Pub/Sub link on asyncio streams: connect, authenticate, name itself,
send SUBSCRIBE/UNSUBSCRIBE, read replies (RESP2).

The seal notifier uses this instead of a ``redis.asyncio`` connection because it must stop
in one step: a cancelled read here ends at once, and writes are synchronous, so a loop that
ends right after the last wait (``asyncio.run``, an SDK's ``run_sync``) leaves no task
pending. ``redis.asyncio``'s read, cancelled, awaits its own disconnect first.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

#: Seconds to connect and authenticate when the settings name none.
DEFAULT_CONNECT_TIMEOUT_S = 5.0


class ReplyError(Exception):
    """Redis answered with an error (the text is Redis's, never shown to an agent)."""


def _encode(parts: tuple[str, ...]) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part.encode("utf-8")
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _ssl_context(settings: dict[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context(
        cafile=settings.get("ssl_ca_certs"), cadata=settings.get("ssl_ca_data")
    )
    if settings.get("ssl_certfile"):
        context.load_cert_chain(
            settings["ssl_certfile"], settings.get("ssl_keyfile"), settings.get("ssl_password")
        )
    if settings.get("ssl_cert_reqs") in ("none", ssl.CERT_NONE):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.check_hostname = bool(settings.get("ssl_check_hostname", True))
    return context


class PubSubLink:
    """One connection in Pub/Sub mode."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, settings: dict[str, Any], *, use_ssl: bool, name: str) -> PubSubLink:
        """Connects as ``settings`` say (host/port or path, credentials, TLS) and names the
        connection ``name`` (``CLIENT LIST`` shows it)."""
        timeout = settings.get("socket_connect_timeout") or DEFAULT_CONNECT_TIMEOUT_S
        async with asyncio.timeout(timeout):
            if settings.get("path"):
                reader, writer = await asyncio.open_unix_connection(settings["path"])
            else:
                reader, writer = await asyncio.open_connection(
                    settings.get("host", "localhost"),
                    int(settings.get("port", 6379)),
                    ssl=_ssl_context(settings) if use_ssl else None,
                )
            link = cls(reader, writer)
            try:
                await link._handshake(settings, name)
            except BaseException:
                link.close()
                raise
        return link

    async def _handshake(self, settings: dict[str, Any], name: str) -> None:
        username, password = settings.get("username"), settings.get("password")
        provider = settings.get("credential_provider")
        if provider is not None:
            credentials = provider.get_credentials()
            username, password = (None, credentials[0]) if len(credentials) == 1 else credentials
        commands = []
        if password:
            commands.append(("AUTH", username, password) if username else ("AUTH", password))
        commands.append(("CLIENT", "SETNAME", name))
        if settings.get("db"):
            # Pub/Sub ignores the DB; selecting it lets CLIENT LIST tell whose link this is.
            commands.append(("SELECT", str(settings["db"])))
        for command in commands:
            self.send(*command)
        for _ in commands:
            await self.read()  # raises ReplyError on a refusal

    def send(self, *parts: str) -> None:
        """Queues a command on the socket at once (no await, so order is call order)."""
        self._writer.write(_encode(parts))

    async def read(self) -> Any:
        """One reply: a list, a str, an int or None."""
        line = await self._reader.readuntil(b"\r\n")
        kind, rest = line[:1], line[1:-2]
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [await self.read() for _ in range(count)]
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = await self._reader.readexactly(size + 2)
            return data[:-2].decode("utf-8", "replace")
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest.decode("utf-8", "replace")
        if kind == b"-":
            raise ReplyError(rest.decode("utf-8", "replace"))
        raise ReplyError("unexpected reply")

    def close(self) -> None:
        self._writer.close()
