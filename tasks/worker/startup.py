"""A worker's start-up wait for its services: the store, the broker and the result backend.

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

from boundary import BoundaryError, ErrorCode
from tasks.runtime import Runtime
from tasks.settings import redis_location
from tasks.wiring.services import check_broker, check_result_backend

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


def worker_services(runtime: Runtime, app: Any) -> list[Service]:
    """What a worker needs at start, in the order it is checked."""
    settings = runtime.settings
    services = [
        Service("store", redis_location(settings.store_url), runtime.store.ping),
        Service(
            "broker",
            redis_location(settings.broker),
            lambda: check_broker(app, settings.publish_timeout_s, retries=0),
        ),
    ]
    if settings.backend.startswith(_CHECKED_BACKENDS):
        services.append(
            Service(
                "result backend",
                redis_location(settings.backend),
                lambda: check_result_backend(app),
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
        down = _first_down(services)
        if down is None:
            return
        where = f"the {down.part} at {down.location} is unreachable"
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


def _first_down(services: list[Service]) -> Service | None:
    for service in services:
        try:
            service.check()
        except Exception:
            # A driver's text may name the URL, password included: only the part is reported.
            return service
    return None
