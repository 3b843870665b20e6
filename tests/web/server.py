"""The web view served by a real uvicorn on a thread, on a port of the tests' range."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from starlette.types import ASGIApp

from tasks.web.server import uvicorn_server
from tests.support.helpers import wait_until
from tests.support.servers import free_port, release_port


@dataclass
class Served:
    base: str
    host: str
    port: int


@contextmanager
def serving(app: ASGIApp, host: str = "127.0.0.1") -> Iterator[Served]:
    """Serves ``app`` until the block ends (the server's live views are closed at its end)."""
    port = free_port()
    server = uvicorn_server(app, host=host, port=port)
    thread = threading.Thread(target=server.run, name="web-view", daemon=True)
    thread.start()
    try:

        def started() -> bool:
            if not thread.is_alive():
                raise RuntimeError("the web view did not start")
            return bool(server.started)

        wait_until(started, "the web view to start", 20, every=0.05)
        yield Served(f"http://127.0.0.1:{port}", host, port)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        release_port(port)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def fetch(url: str, headers: dict[str, str] | None = None, data: bytes | None = None) -> Answer:
    """One request, redirects not followed; an error status is an answer too."""
    request = urllib.request.Request(url, headers=headers or {}, data=data)
    try:
        with _opener.open(request, timeout=10) as response:
            return Answer(response.status, dict(response.headers), response.read().decode())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, dict(exc.headers), exc.read().decode())


def first_event(url: str, headers: dict[str, str] | None = None, timeout_s: float = 15.0) -> str:
    """The first ``calls`` event of a run's live stream (its data line)."""
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for raw in response:
            line = raw.decode()
            if line.startswith("data: "):
                return line[len("data: ") :]
    raise AssertionError("the stream ended without an event")
