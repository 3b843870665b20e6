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
    import uvicorn

    from tasks.web.server import SHUTDOWN_GRACE_S, build_app

    app = build_app(settings, show_raw=False, token=None)
    config = uvicorn.Config(
        app,
        host=HOST,
        port=port,
        log_level="error",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    server = uvicorn.Server(config)
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
