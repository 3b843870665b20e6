"""``tasks.boundary_from_env``: a caller process built from nothing but the ``TOOL_BOUNDARY_*``
settings its workers read agrees with them on limits, TTL and Cluster mode.

The caller is a process of its own (``tests.celery.from_env_caller``), as a user's is; the
worker is the suite's real worker, built from the same settings (``celery_settings``, whose
TTL and raw-response limit are not the defaults)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster

from boundary import CanonicalKey, ErrorCode, Limits, ToolRegistry
from boundary.store import keys
from boundary.store.base import DEFAULT_TTL_S
from tasks import aboundary_from_env, boundary_from_env
from tasks.runtime import get_runtime, store_from_settings
from tasks.settings import InvalidSettings, Settings
from tests.celery.workers import ROOT, settings_env
from tests.conftest import redis_url
from tests.support.servers import RedisServer
from tests.support.servers import redis_cluster as start_cluster

#: Longest the caller process may take from start to its printed line, seconds.
PROCESS_TIMEOUT_S = 120


def caller(settings: Settings, run_id: str, *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """Runs the caller process with ``settings`` as its environment; its printed line."""
    argv = [a for tool, arguments in calls for a in (tool, json.dumps(arguments))]
    done = subprocess.run(
        [sys.executable, "-m", "tests.celery.from_env_caller", run_id, *argv],
        cwd=ROOT,
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=True,
    )
    line: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return line


def test_a_caller_built_from_the_env_agrees_with_the_worker_on_limits_and_ttl(
    celery_session_worker: object, redis_client: redis.Redis, celery_settings: Settings
) -> None:
    # Given the worker's settings, with a TTL and a raw-response limit that are not defaults
    worker_store = get_runtime().store
    assert celery_settings.ttl_s != DEFAULT_TTL_S
    assert celery_settings.max_raw_bytes < Limits().max_raw_bytes < 200_000 * 10

    # When a caller process built by boundary_from_env from the same settings calls a tool,
    # and a tool whose raw response is over the settings' limit but under the default one
    run_id = f"env-{uuid.uuid4().hex[:12]}"
    line = caller(
        celery_settings,
        run_id,
        ("lookup", {"query": "x"}),
        ("huge_raw", {"bytes": celery_settings.max_raw_bytes * 2}),
    )

    # Then the caller was built with the worker's limits, TTL, Cluster mode and times
    built = line["built"]
    assert built["limits"] == worker_store.limits.model_dump(mode="json")
    assert built["ttl_s"] == worker_store.ttl_s == celery_settings.ttl_s
    assert built["cluster"] is isinstance(worker_store.client, redis.cluster.RedisCluster)
    assert built["max_pending_s"] == celery_settings.max_pending_s
    assert built["reap_grace_s"] == celery_settings.reap_grace_s
    # And the worker ran its call, and refused the raw response over the shared limit
    ready, too_large = line["outcomes"]
    assert ready["status"] == "READY"
    assert too_large["error_code"] == ErrorCode.RESULT_TOO_LARGE.value
    # And the record the caller created and the worker sealed expires by the shared TTL
    ttl = redis_client.ttl(keys.record_key(CanonicalKey(run_id=run_id, tool_call_id="c1")))
    assert 0 < ttl <= celery_settings.ttl_s


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    with start_cluster(tmp_path_factory.mktemp("from-env-cluster")) as servers:
        yield servers


def test_a_caller_built_from_the_env_finds_the_cluster_the_workers_find(
    cluster: list[RedisServer],
) -> None:
    # Given settings naming one node of a Redis Cluster (Cluster mode not set: asked of it)
    settings = Settings(
        redis_url=cluster[0].url,
        broker_url=redis_url(0),
        ttl_s=900,
        max_raw_bytes=12_345,
        tools="tests.support.celery_tools:registry",
    )
    assert settings.redis_cluster is None

    # When a caller process is built from them, and a worker's store (the runtime's way)
    line = caller(settings, "env-cluster")
    worker_store = store_from_settings(settings)

    # Then both are on the Cluster, with the same TTL and limits
    assert line["built"]["cluster"] is True
    assert isinstance(worker_store.client, redis.cluster.RedisCluster)
    assert line["built"]["ttl_s"] == worker_store.ttl_s == 900
    assert line["built"]["limits"] == worker_store.limits.model_dump(mode="json")
    worker_store.client.close()


def test_overrides_go_over_the_env_and_a_bad_one_is_named(
    celery_session_app: object, redis_client: redis.Redis
) -> None:
    registry = ToolRegistry()
    # An override changes only what it names
    built = boundary_from_env(registry, ttl_s=1234, max_raw_bytes=4321)
    assert built.store.ttl_s == 1234  # type: ignore[attr-defined]
    assert built.store.limits.max_raw_bytes == 4321
    assert built.store.limits.max_request_bytes == get_runtime().store.limits.max_request_bytes
    # A name that is no setting, and a value that does not validate, are refused
    with pytest.raises(TypeError, match="ttl"):
        boundary_from_env(registry, ttl=5)
    with pytest.raises(InvalidSettings) as refused:
        boundary_from_env(registry, ttl_s=0)
    assert refused.value.names == ["TOOL_BOUNDARY_TTL_S"]
    # The async twin builds the same boundary off the event loop
    abuilt = asyncio.run(aboundary_from_env(registry, ttl_s=1234))
    assert abuilt.store.ttl_s == 1234  # type: ignore[attr-defined]
    assert abuilt.store.limits == get_runtime().store.limits
    assert abuilt.max_pending_s == get_runtime().settings.max_pending_s
