"""``demo --web``: the demo's run in the web view (``tasks.web``), served from the demo's own
process so it sees the embedded store too, on loopback only."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tasks.settings import Settings

#: Where the demo serves the web view.
HOST = "127.0.0.1"
#: Seconds the server may take to start.
START_TIMEOUT_S = 20.0


@contextmanager
def web_view(settings: Settings, port: int) -> Iterator[str]:
    """Serves the web view of ``settings``' store on 127.0.0.1:``port``; yields its URL."""
    from tasks.web.server import build_app, uvicorn_server

    app = build_app(settings, show_raw=False, token=None)
    server = uvicorn_server(app, host=HOST, port=port, log_level="error")
    thread = threading.Thread(target=server.run, name="demo-web", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise OSError(f"the web view could not listen on {HOST}:{port}")
        time.sleep(0.05)
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
