"""Shared fixtures: real Redis on a DB of our own, flushed before and after each test.

Locally a missing Redis skips the tests that need it; under CI (``CI`` set) it fails them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from boundary import (
    InProcessDispatcher,
    Limits,
    RedisCanonicalStore,
    ToolBoundary,
    ToolRegistry,
)
from tasks import CeleryDispatcher, configure
from tasks.app import PROJECTIONS_QUEUE, TOOLS_QUEUE
from tasks.runtime import get_runtime
from tasks.settings import Settings

pytest_plugins = ("celery.contrib.pytest",)

CI = bool(os.environ.get("CI"))
REDIS_HOST = os.environ.get("TB_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("TB_TEST_REDIS_PORT", "6379"))
#: The store's DB in tests; the Celery broker's and result backend's DBs.
STORE_DB = int(os.environ.get("TB_TEST_STORE_DB", "11"))
BROKER_DB = int(os.environ.get("TB_TEST_BROKER_DB", "12"))
BACKEND_DB = int(os.environ.get("TB_TEST_BACKEND_DB", "13"))
#: The broker DB of worker subprocesses, apart from the in-process worker's queues.
SUBPROCESS_BROKER_DB = int(os.environ.get("TB_TEST_SUBPROCESS_BROKER_DB", "10"))
#: RabbitMQ for the tests that run once more with it as the broker.
AMQP_URL = os.environ.get("TB_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
#: The raw-response limit of the Celery tests' settings (small, so a test can pass it).
CELERY_MAX_RAW_BYTES = 100_000


def redis_url(db: int) -> str:
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"


def require_service(name: str, host: str, port: int) -> None:
    """Skips locally, fails under CI, when a service the test needs does not answer."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        if CI:
            raise
        pytest.skip(f"{name} is not running at {host}:{port}: {exc}")


def _require_redis(db: int) -> redis.Redis:
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db, decode_responses=True)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        if CI:
            raise
        pytest.skip(f"Redis is not running at {REDIS_HOST}:{REDIS_PORT}: {exc}")
    return client


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """A raw client on the store's test DB, flushed before and after the test."""
    client = _require_redis(STORE_DB)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def limits() -> Limits:
    return Limits()


@pytest.fixture
def store(redis_client: redis.Redis, limits: Limits) -> RedisCanonicalStore:
    return RedisCanonicalStore(client=redis_client, ttl_s=600, limits=limits)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


@pytest.fixture
def boundary(store: RedisCanonicalStore, registry: ToolRegistry) -> ToolBoundary:
    """A boundary whose dispatcher runs the steps in-process (no Celery)."""
    return ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )


# --- Celery: our own app, configured for the test DBs, and a real worker thread ------------


def celery_test_settings(**overrides: object) -> Settings:
    """Settings of the Celery tests; also exported to worker subprocesses as environment."""
    values: dict[str, object] = {
        "redis_url": redis_url(STORE_DB),
        "broker_url": redis_url(BROKER_DB),
        "result_backend": redis_url(BACKEND_DB),
        "tools": "tests.celery_tools:registry",
        "ttl_s": 600,
        "max_raw_bytes": CELERY_MAX_RAW_BYTES,
        "reap_grace_s": 1,
        "publish_timeout_s": 2,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def celery_settings() -> Settings:
    return celery_test_settings()


@pytest.fixture(scope="session")
def celery_session_app(celery_settings: Settings) -> Celery:
    """The project's own app (not a TestApp), pointed at the test DBs."""
    for db in (BROKER_DB, BACKEND_DB):
        _require_redis(db).flushdb()
    return configure(celery_settings)


@pytest.fixture(scope="session")
def celery_worker_pool() -> str:
    return "threads"


@pytest.fixture(scope="session")
def celery_worker_parameters() -> dict[str, object]:
    return {
        "concurrency": 8,
        "queues": [TOOLS_QUEUE, PROJECTIONS_QUEUE],
        "perform_ping_check": False,
        "shutdown_timeout": 60,
    }


@pytest.fixture
def celery_boundary(
    celery_session_worker: object, redis_client: redis.Redis, celery_session_app: Celery
) -> ToolBoundary:
    """A boundary over the real worker thread, on a freshly flushed store DB."""
    runtime = get_runtime()
    return runtime.boundary(CeleryDispatcher(celery_session_app))
