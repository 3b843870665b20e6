"""Fixtures of the Celery tests: the call stacks (Redis broker with an in-process worker,
RabbitMQ broker with a worker subprocess) and helpers to read what a call left behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import RunContext, ToolBoundary
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.workers import celery_process, worker_args
from tests.conftest import (
    AMQP_GROUP,
    AMQP_URL,
    BACKEND_DB,
    celery_test_settings,
    flush_db,
    require_service,
)
from tests.support import celery_tools
from tests.support.celery_tools import registry

#: A run allowed to call every test tool.
RUN = RunContext(run_id="run-e2e", authorized_tools=frozenset(spec.name for spec in registry))


@dataclass
class Stack:
    name: str
    boundary: ToolBoundary
    app: Celery


@pytest.fixture(scope="module")
def rabbitmq_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Celery]:
    """A real worker subprocess consuming from RabbitMQ; results and store on Redis."""
    require_service("RabbitMQ", "127.0.0.1", 5672)
    settings = celery_test_settings(broker_url=AMQP_URL)
    client = create_app(settings, name="tests_amqp_client")
    client.control.purge()
    log = tmp_path_factory.mktemp("amqp") / "worker.log"
    with celery_process(settings, *worker_args("amqp-worker"), log=log):
        yield client


@pytest.fixture(params=["redis", pytest.param("rabbitmq", marks=AMQP_GROUP)])
def stack(request: pytest.FixtureRequest, redis_client: redis.Redis) -> Stack:
    """Each test runs once per broker: Redis (worker thread) and RabbitMQ (worker process)."""
    # The session app configures this process's runtime (the test tools, the test store) for
    # both: a RabbitMQ test that runs first on an xdist worker would find it unconfigured.
    app = request.getfixturevalue("celery_session_app")
    if request.param == "redis":
        request.getfixturevalue("celery_session_worker")
    else:
        app = request.getfixturevalue("rabbitmq_worker")
    # Results of earlier tests' calls (same ids, records flushed) must not be read as stale.
    flush_db(BACKEND_DB)
    boundary = get_runtime().boundary(CeleryDispatcher(app))
    return Stack(name=request.param, boundary=boundary, app=app)


def all_redis_text(client: redis.Redis) -> str:
    """Every key and value of a Redis DB as one text (strings, hashes, lists, sets, zsets)."""
    parts: list[str] = []
    for key in client.scan_iter(count=1000):
        parts.append(str(key))
        kind = client.type(key)
        if kind == "string":
            parts.append(str(client.get(key)))
        elif kind == "hash":
            parts.extend(f"{k}={v}" for k, v in client.hgetall(key).items())
        elif kind == "list":
            parts.extend(map(str, client.lrange(key, 0, -1)))
        elif kind == "set":
            parts.extend(map(str, client.smembers(key)))
        elif kind == "zset":
            parts.extend(str(m) for m, _ in client.zrange(key, 0, -1, withscores=True))
    return "\n".join(parts)


def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def held_calls() -> Iterator[threading.Event]:
    """``held`` calls on the in-process worker run until the test sets this event (at the
    latest when it ends): a call "still running" then does not depend on the machine's speed."""
    celery_tools.HELD.clear()
    yield celery_tools.HELD
    celery_tools.HELD.set()
