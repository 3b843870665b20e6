"""Shared fixtures: real Redis on a DB of our own, flushed before and after each test.

Locally a missing Redis skips the tests that need it; under CI (``CI`` set) it fails them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from boundary import (
    InProcessDispatcher,
    Limits,
    RedisCanonicalStore,
    ToolBoundary,
    ToolRegistry,
)

pytest_plugins = ("celery.contrib.pytest",)

CI = bool(os.environ.get("CI"))
REDIS_HOST = os.environ.get("TB_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("TB_TEST_REDIS_PORT", "6379"))
#: The store's DB in tests. Other test DBs: 12 (Celery broker), 13 (Celery results).
STORE_DB = int(os.environ.get("TB_TEST_STORE_DB", "11"))


def redis_url(db: int) -> str:
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"


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
