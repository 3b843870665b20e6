"""A worker subprocess and a caller's boundary on the TLS server, each connecting as its own
role's user from the standard URL forms alone (``rediss://user:password@...?ssl_...``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.rig import workers as rig
from boundary import RedisCanonicalStore, ToolBoundary
from tasks import CeleryDispatcher
from tasks.settings import Settings
from tasks.wiring.app import create_app
from tests.celery.workers import celery_process
from tests.conftest import celery_test_settings
from tests.support.celery_tools import registry
from tests.tls.servers import TlsRedisServer

STORE_DB, BACKEND_DB = 0, 0


def role_settings(
    server: TlsRedisServer, role: str, broker_db: int, **overrides: object
) -> Settings:
    """Settings whose store, broker and result backend are all ``role``'s user over TLS."""
    return celery_test_settings(
        redis_url=server.url_for(role, STORE_DB),
        broker_url=server.url_for(role, broker_db),
        result_backend=server.url_for(role, BACKEND_DB),
        **overrides,
    )


def caller(server: TlsRedisServer, broker_db: int, role: str = "caller") -> ToolBoundary:
    settings = role_settings(server, role, broker_db)
    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
    app = create_app(settings, name=f"tls_{role}_{broker_db}")
    return ToolBoundary(store=store, registry=registry, dispatcher=CeleryDispatcher(app))


@contextmanager
def worker(
    server: TlsRedisServer,
    log: Path,
    broker_db: int,
    *,
    pool: str = "threads",
    role: str = "worker",
    queues: tuple[str, ...] = ("tools", "projections"),
    level: str = "INFO",
    **overrides: object,
) -> Iterator[object]:
    settings = role_settings(server, role, broker_db, **overrides)
    args = rig.worker_args(pool, 2, queues, node=f"tls-{pool}@%h", level=level)
    with celery_process(settings, *args, log=log, timeout_s=60) as proc:
        yield proc
