"""Fixtures of the MCP tests: a real worker (the in-process Celery worker thread), real
``tool-boundary mcp`` server processes, an opened run, and the SDK's own client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from boundary import RedisCanonicalStore, RunContext
from tests.celery.test_cancel import events  # noqa: F401  (a fixture: task start/end/revoke)
from tests.mcp.servers import HttpServer, http_server
from tests.support.celery_tools import registry

pytest.importorskip("mcp")

#: The run the tests' calls belong to, opened in Redis before each test.
RUN_ID = "run-mcp"
RUN = RunContext(run_id=RUN_ID, authorized_tools=frozenset(spec.name for spec in registry))


@pytest.fixture
def store(redis_client: redis.Redis) -> RedisCanonicalStore:
    """The store the servers and the worker use (its DB is flushed around each test)."""
    return RedisCanonicalStore(client=redis_client, ttl_s=600)


@pytest.fixture
def opened_run(
    celery_session_worker: object, store: RedisCanonicalStore, redis_client: redis.Redis
) -> RunContext:
    """A worker is running and ``RUN`` is open."""
    assert store.open_run(RUN).is_open
    return RUN


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-logs")


@pytest.fixture(scope="module")
def server_a(logs: Path) -> Iterator[HttpServer]:
    with http_server(logs / "a.log") as server:
        yield server


@pytest.fixture(scope="module")
def server_b(logs: Path) -> Iterator[HttpServer]:
    with http_server(logs / "b.log") as server:
        yield server
