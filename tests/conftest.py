"""Shared fixtures: real Redis on a DB of our own, flushed before and after each test.

The server and DB numbers come from ``tests/support/settings.py`` (``TB_TEST_*`` variables). Locally
a missing Redis skips the tests that need it (probed once per session, so skipping is fast);
under CI (``CI`` set) it fails them.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator

import pytest
import redis
from celery import Celery
from redis.backoff import NoBackoff
from redis.retry import Retry

from boundary import (
    InProcessDispatcher,
    Limits,
    RedisCanonicalStore,
    ToolBoundary,
    ToolRegistry,
)
from tasks import CeleryDispatcher, configure
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import PROJECTIONS_QUEUE, TOOLS_QUEUE
from tests.support import xdist_worker

# Before SUITE is built: an xdist worker's own ports and Redis (tests/support/xdist_worker.py).
xdist_worker.isolate()

from tests.support.servers import CI  # noqa: E402  (its ports: after isolate())
from tests.support.settings import SUITE  # noqa: E402

pytest_plugins = ("celery.contrib.pytest",)

REDIS_HOST = SUITE.redis_host
REDIS_PORT = SUITE.redis_port
#: The store's DB in tests; the Celery broker's and result backend's DBs.
STORE_DB = SUITE.store_db
BROKER_DB = SUITE.broker_db
BACKEND_DB = SUITE.backend_db
#: The broker DB of worker subprocesses, apart from the in-process worker's queues.
SUBPROCESS_BROKER_DB = SUITE.subprocess_broker_db
#: RabbitMQ for the tests that run once more with it as the broker.
AMQP_URL = SUITE.amqp_url
#: The mark of every test that uses RabbitMQ: their queues have fixed names on one vhost, so
#: in a parallel run (``--dist loadgroup``) one xdist worker runs them all.
AMQP_GROUP = pytest.mark.xdist_group("amqp")
#: The raw-response limit of the Celery tests' settings (small, so a test can pass it).
CELERY_MAX_RAW_BYTES = 100_000
#: Seconds a probe of a service may take: a missing service skips in well under a second
#: (under CI, where it fails, a loaded machine gets longer).
PROBE_TIMEOUT_S = 5.0 if CI else 0.5
#: Keys this suite (and the Celery, kombu and tool-boundary code it runs) writes. A DB holding
#: any other key belongs to someone else and is not flushed (unless TB_TEST_FLUSH_ANY=1).
OWN_KEYS = re.compile(
    r"^(tb:|celery|_kombu\.|unacked|tools|long|projections|.*\.reply\.celery\.pidbox$)"
)


#: xdist workers of a plain ``pytest`` run. The suite waits on Redis, workers and timeouts far
#: more than it computes: on two cores, two workers took 616-630 s and three 454-504 s (load
#: average 2-5 with three); ``-n 0`` runs serially.
DEFAULT_WORKERS = 3


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> object:
    """``-n N`` distributes by ``xdist_group`` (``--dist loadgroup``) unless ``--dist`` says
    otherwise; a plain run uses ``DEFAULT_WORKERS`` workers, or runs serially when the Redis
    server is named (``TB_TEST_REDIS_HOST``/``PORT``). ``-p no:xdist`` and ``--pdb`` run
    serially. A hook rather than ``addopts``, so that ``-p no:xdist`` works."""
    if (
        config.pluginmanager.hasplugin("xdist")
        and not xdist_worker.WORKER
        and not config.getoption("usepdb", False)
        and not config.getoption("trace", False)
        and not config.getoption("collectonly", False)
    ):
        if config.getoption("numprocesses", None) is None:
            # A Redis server named by the user is one set of DBs: every worker would share it.
            named = any(v in os.environ for v in ("TB_TEST_REDIS_HOST", "TB_TEST_REDIS_PORT"))
            config.option.numprocesses = 0 if named else DEFAULT_WORKERS
        if config.option.numprocesses and config.getoption("dist", "no") == "no":
            config.option.dist = "loadgroup"
    return (yield)


def redis_url(db: int) -> str:
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"


#: Probe results of this session, by (host, port): None when it answered, else why not.
_probes: dict[tuple[str, int], str | None] = {}
#: The DBs found to hold only this suite's keys (or told to be flushed anyway).
_checked_dbs: set[int] = set()


def _probe(name: str, host: str, port: int, ping: bool) -> str | None:
    """Probes a service once per session; every later test reuses the answer."""
    if (host, port) not in _probes:
        try:
            if ping:
                # No retries: redis-py's default backoff made each skip take about 4 s.
                client = redis.Redis(
                    host=host,
                    port=port,
                    socket_connect_timeout=PROBE_TIMEOUT_S,
                    socket_timeout=PROBE_TIMEOUT_S * 4,
                    retry=Retry(NoBackoff(), 0),
                )
                client.ping()
                client.close()
            else:
                socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
            _probes[host, port] = None
        except (OSError, redis.RedisError) as exc:
            _probes[host, port] = f"{name} is not running at {host}:{port}: {exc}"
    return _probes[host, port]


def require_service(name: str, host: str, port: int) -> None:
    """Skips locally, fails under CI, when a service the test needs does not answer."""
    problem = _probe(name, host, port, ping=name == "Redis")
    if problem is not None:
        if CI:
            pytest.fail(problem)
        pytest.skip(problem)


def _require_redis(db: int) -> redis.Redis:
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    return redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db, decode_responses=True)


def flush_db(db: int) -> redis.Redis:
    """Flushes one of the suite's DBs; refuses (ends the session) a DB not named by the
    settings, or one that holds keys this suite does not write, unless TB_TEST_FLUSH_ANY=1."""
    if db not in SUITE.flushed_dbs:
        pytest.exit(f"the tests may only flush DBs {SUITE.flushed_dbs}, not {db}", returncode=4)
    client = _require_redis(db)
    if db not in _checked_dbs and not SUITE.flush_any:
        foreign = next(
            (key for key in client.scan_iter(count=1000) if not OWN_KEYS.match(key)), None
        )
        if foreign is not None:
            pytest.exit(
                f"Redis {REDIS_HOST}:{REDIS_PORT} DB {db} holds keys this test suite did not "
                f"write (e.g. {foreign!r}); choose free DBs with TB_TEST_STORE_DB, "
                "TB_TEST_BROKER_DB, TB_TEST_BACKEND_DB, TB_TEST_SUBPROCESS_BROKER_DB, or set "
                "TB_TEST_FLUSH_ANY=1 to flush it anyway",
                returncode=4,
            )
    _checked_dbs.add(db)
    client.flushdb()
    return client


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """A raw client on the store's test DB, flushed before and after the test."""
    client = flush_db(STORE_DB)
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
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry, inline=True)
    )


# --- Celery: our own app, configured for the test DBs, and a real worker thread ------------


def celery_test_settings(**overrides: object) -> Settings:
    """Settings of the Celery tests; also exported to worker subprocesses as environment."""
    values: dict[str, object] = {
        "redis_url": redis_url(STORE_DB),
        "broker_url": redis_url(BROKER_DB),
        "result_backend": redis_url(BACKEND_DB),
        "tools": "tests.support.celery_tools:registry",
        "ttl_s": 600,
        "max_raw_bytes": CELERY_MAX_RAW_BYTES,
        "reap_grace_s": 1,
        "publish_timeout_s": 2,
        # A re-projection chunk killed with its worker frees its slot of the chunks' cap
        # this long after its last renewal (the default, 30 s, would only slow the tests).
        "reproject_lease_s": 3,
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
        flush_db(db)
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
