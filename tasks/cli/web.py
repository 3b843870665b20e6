"""``web``: runs, calls and records in a browser (``tasks.web``), live while calls run."""

from __future__ import annotations

from typing import Annotated

import typer

from boundary import ConfigurationError
from tasks.cli.common import fail, reaching, settings_or_fail
from tasks.exits import EXIT_USAGE

#: Defaults, repeated from ``tasks.web.server`` so ``--help`` needs no web extra.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8766


def web(
    host: Annotated[
        str,
        typer.Option(
            "--host", help="Bind address; beyond loopback TOOL_BOUNDARY_WEB_TOKEN is required."
        ),
    ] = DEFAULT_HOST,
    port: Annotated[int, typer.Option("--port", help="HTTP port.")] = DEFAULT_PORT,
    show_raw: Annotated[
        bool,
        typer.Option(
            "--show-raw", help="Show each call's raw response on its page (Harness-only data)."
        ),
    ] = False,
) -> None:
    """Serve the web view: runs (newest first), a run's calls with live progress, each call's
    record, and a cancel button for calls in flight.

    With TOOL_BOUNDARY_WEB_TOKEN set, every request needs it: as a bearer token, or once in
    the URL (?token=...), which sets a session cookie. Raw responses appear only with
    --show-raw.
    """
    try:
        from tasks.web.server import build_app, serve, web_token
    except ImportError:
        fail("the web view needs the web extra: pip install 'tool-boundary[web]'", EXIT_USAGE)
    settings = settings_or_fail()
    try:
        token = web_token(host)
    except ConfigurationError as exc:
        fail(exc.problem, EXIT_USAGE)
    with reaching(settings):
        app = build_app(settings, show_raw=show_raw, token=token)
        typer.echo(
            f"tool-boundary web: http://{host}:{port}/" + (" (token required)" if token else "")
        )
        serve(app, host=host, port=port)
