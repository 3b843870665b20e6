"""A worker's start-up check (``check_runtime``, at ``worker_init``) and its wait for its
services: the store, the broker and the result backend.

A worker started before its Redis, or given a wrong URL, tries each service
``TOOL_BOUNDARY_STARTUP_ATTEMPTS`` times (1 s apart, growing to 5 s), then stops with one line
and exit 3. Without it a worker with no store started anyway and ended every call
STORE_UNAVAILABLE, and one with no broker sat in Celery's connection loop (100 retries, about
50 minutes), logging an error per retry. Only the start is bounded: once running, a worker
rides out a broker restart with Celery's own reconnection, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from boundary import BoundaryError, ConfigurationError, ErrorCode
from tasks.exits import EXIT_UNAVAILABLE, EXIT_USAGE
from tasks.runtime import Runtime, get_runtime
from tasks.settings import redis_location
from tasks.wiring.app import app as worker_app
from tasks.wiring.redis_access import (
    Reason,
    check_seal_channel,
    describe,
    plaintext_hint,
    unverified,
)
from tasks.wiring.services import check_broker, check_result_backend
from tasks.worker.server_check import check_store_server

logger = logging.getLogger(__name__)

#: Seconds between the first two attempts; each pause doubles, up to the next constant.
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 5.0
#: Result backends this check can read (a Redis one); others are not checked at start.
_CHECKED_BACKENDS = ("redis://", "rediss://", "redis+socket://", "unix://")


class StartupUnavailable(BoundaryError):
    """A service still did not answer after the last start-up attempt.

    Attributes:
        problem: one line for the operator: the service and where it is, never a URL.
    """

    code = ErrorCode.STORE_UNAVAILABLE

    def __init__(self, problem: str) -> None:
        super().__init__()
        self.problem = problem


@dataclass(frozen=True)
class Service:
    #: ``"store"``, ``"broker"`` or ``"result backend"``.
    part: str
    #: Host, port and DB (or vhost): never credentials.
    location: str
    #: Raises when the service does not answer.
    check: Callable[[], None]
    #: The service's URL, only to tell a plaintext URL for a TLS port (never logged).
    url: str = ""


def worker_services(runtime: Runtime, app: Any) -> list[Service]:
    """What a worker needs at start, in the order it is checked."""
    settings = runtime.settings
    services = [
        Service(
            "store", redis_location(settings.store_url), runtime.store.ping, settings.store_url
        ),
        # (the seal script publishes on the run's channel: a user without it would fail every
        # seal; every other right of the worker's is exercised by the checks here)
        Service(
            "store",
            redis_location(settings.store_url),
            lambda: check_seal_channel(runtime.store.client),
        ),
        Service(
            "broker",
            redis_location(settings.broker),
            lambda: check_broker(app, settings.publish_timeout_s, retries=0),
            settings.broker,
        ),
    ]
    if settings.backend.startswith(_CHECKED_BACKENDS):
        services.append(
            Service(
                "result backend",
                redis_location(settings.backend),
                lambda: check_result_backend(app),
                settings.backend,
            )
        )
    return services


def wait_for_services(
    services: list[Service], attempts: int, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Returns once every service answered; logs one warning per failed attempt.

    Raises:
        StartupUnavailable: a service still did not answer at the last attempt (its message
            names the service and where it is, never a URL or a driver's text).
    """
    delay = FIRST_DELAY_S
    for attempt in range(1, attempts + 1):
        failed = _first_down(services)
        if failed is None:
            return
        down, reason = failed
        if reason is not None and reason.permanent:
            # A refused password or right, an untrusted certificate: no retry would help.
            raise ConfigurationError(f"the {down.part} at {down.location}: {reason.text}")
        where = f"the {down.part} at {down.location} is unreachable"
        if reason is not None:
            where += f": {reason.text};"
        if attempt == attempts:
            raise StartupUnavailable(f"{where} after {attempts} attempt(s)")
        logger.warning(
            "tool-boundary worker: %s (attempt %d of %d), trying again in %.0fs",
            where,
            attempt,
            attempts,
            delay,
        )
        sleep(delay)
        delay = min(delay * 2, MAX_DELAY_S)


def _first_down(services: list[Service]) -> tuple[Service, Reason | None] | None:
    for service in services:
        try:
            service.check()
        except Exception as exc:
            # A driver's text may name the URL, password included: only the part is reported,
            # and the reason ``describe`` words itself.
            return service, describe(exc) or plaintext_hint(service.url, exc)
    return None


def check_runtime(**_: Any) -> None:
    """``worker_init``: stops the worker at start, not at its first call, when the registry
    cannot be loaded, the broker's visibility timeout is not above every tool's timeout
    (exit 2), or the store, broker or result backend still does not answer after
    ``STARTUP_ATTEMPTS`` (exit 3).

    ``SystemExit``, because Celery logs and swallows a signal receiver's ``Exception``.
    """
    try:
        runtime = get_runtime()
        longest = runtime.registry.longest_timeout_s
        if runtime.settings.visibility_timeout_s <= longest:
            raise ConfigurationError(
                f"visibility_timeout_s ({runtime.settings.visibility_timeout_s}) must exceed "
                f"the longest tool timeout ({longest:.0f}s), or a second worker would run a "
                "call that is still running"
            )
        wait_for_services(worker_services(runtime, worker_app), runtime.settings.startup_attempts)
        warnings = check_store_server(runtime.store, runtime.settings)
        settings = runtime.settings
        warnings += unverified(
            {
                "store": settings.store_url,
                "broker": settings.broker,
                "result backend": settings.backend,
            }
        )
    except ConfigurationError as exc:
        # One line (the log's), then exit 2: a traceback would tell the operator nothing more.
        logger.critical("tool-boundary worker cannot start: %s", exc.problem)
        raise SystemExit(EXIT_USAGE) from None
    except StartupUnavailable as exc:
        logger.critical("tool-boundary worker cannot start: %s", exc.problem)
        raise SystemExit(EXIT_UNAVAILABLE) from None
    for warning in warnings:
        logger.warning("tool-boundary worker: %s", warning)
    logger.info(
        "tool-boundary worker: %d tool(s), longest timeout %.0fs", len(runtime.registry), longest
    )
