"""Serving the web view: its token rule, the store and cancel it uses, uvicorn."""

from __future__ import annotations

import os

import uvicorn
from starlette.types import ASGIApp

from boundary import ConfigurationError, ToolBoundary, ToolOutcome
from boundary.flow import Flow
from tasks.runtime import registry_or_empty, store_from_settings
from tasks.settings import Settings, is_loopback, redis_location
from tasks.web.app import create_app
from tasks.worker import chunk_slots

#: Where ``tool-boundary web`` listens by default.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8766
#: The environment variable of the token.
TOKEN_VARIABLE = "TOOL_BOUNDARY_WEB_TOKEN"  # noqa: S105 (a variable name)
#: Seconds uvicorn waits for open live views when it stops.
SHUTDOWN_GRACE_S = 1


def web_token(host: str) -> str | None:
    """The token to require: ``TOOL_BOUNDARY_WEB_TOKEN`` (enforced on loopback too when set).

    Raises:
        ConfigurationError: binding beyond loopback without a token.
    """
    token = os.environ.get(TOKEN_VARIABLE) or None
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"serving on {host} needs {TOKEN_VARIABLE} (anyone who reaches the port could "
            "read every record and cancel calls)"
        )
    return token


def build_app(settings: Settings, *, show_raw: bool, token: str | None) -> ASGIApp:
    """The web view over the settings' store; cancels go through the settings' broker."""
    from tasks.wiring.app import create_app as create_celery_app
    from tasks.wiring.dispatcher import CeleryDispatcher

    store = store_from_settings(settings)
    # The tools' registry, for their declared limits: a cancel of a limited tool's call gives
    # its slot (or place in line) up, and the limits page lists them. Without it, the pages
    # work all the same (a cancelled call's slot is then left to the reaper's check).
    registry = registry_or_empty(settings)
    boundary = ToolBoundary(
        store=store,
        registry=registry,
        dispatcher=CeleryDispatcher(create_celery_app(settings, name="tool_boundary_web")),
    )

    def cancel(run_id: str, tool_call_id: str) -> ToolOutcome:
        return boundary.cancel(run_id, tool_call_id)

    def time_limit(tool: str) -> float | None:
        spec = registry.get(tool)
        return None if spec is None else spec.timeout_s

    flow = store.flow if isinstance(store.flow, Flow) else None
    if flow is not None:
        # The fleet's own entries (the re-projection chunks' cap) are listed like tools, as
        # ``tool-boundary limits`` lists them, whether or not a chunk has used one yet.
        chunk_slots.reserve(flow, settings)
    return create_app(
        store,
        canceller=cancel,
        show_raw=show_raw,
        token=token,
        store_label=redis_location(settings.store_url),
        flow=flow,
        time_limit=time_limit,
    )


def uvicorn_server(
    app: ASGIApp, *, host: str, port: int, log_level: str = "warning"
) -> uvicorn.Server:
    """The web view's server. Access logs are off: a login link carries its token. Open
    live views hold a stop up for ``SHUTDOWN_GRACE_S`` at most."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    return uvicorn.Server(config)


def serve(app: ASGIApp, *, host: str, port: int) -> None:
    """Serves until SIGINT/SIGTERM."""
    uvicorn_server(app, host=host, port=port).run()
