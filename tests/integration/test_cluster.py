"""The full flow on a real 3-node Redis Cluster (started by the test): the store, observe,
the reaper, the CLI and a Celery worker, for runs whose slots are spread over every node."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boundary import (
    CanonicalKey,
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.store import keys
from tests.support.celery_tools import registry
from tests.support.helpers import create_terms
from tests.support.servers import RedisServer, redis_cluster

ROOT = Path(__file__).resolve().parents[2]
RUNS = 8
CALLS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as servers:
        yield servers


def _run(n: int) -> RunContext:
    return RunContext(run_id=f"cl-run-{n}", authorized_tools=frozenset({"lookup"}))


def _call(run: RunContext, n: int) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=run.run_id, tool_call_id=f"c{n}", tool_name="lookup", arguments={"query": "x"}
    )


def test_calls_of_runs_on_every_node_end_ready_and_are_observed(
    cluster: list[RedisServer],
) -> None:
    # Given a store on the cluster, named by one node's URL
    store = RedisCanonicalStore.from_url(cluster[0].url, ttl_s=600, cluster=True)
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    slots_of = {
        store.client.keyslot(keys.record_key(CanonicalKey(run_id=f"cl-run-{n}", tool_call_id="c")))
        for n in range(RUNS)
    }
    owners = {store.client.get_node_from_key(f"{{cl-run-{n}}}").port for n in range(RUNS)}
    assert len(owners) == len(cluster), "the runs' slots should cover every node"
    # When calls of runs on every node are made
    outcomes = [
        boundary.invoke(_call(_run(r), c), _run(r), timeout=30)
        for r in range(RUNS)
        for c in range(CALLS)
    ]
    # Then every call ends READY and every run is observed in full
    assert all(o.status is InvocationStatus.READY for o in outcomes), outcomes
    for r in range(RUNS):
        assert len(boundary.observe(_run(r)).facts) == CALLS
    assert sorted(store.run_ids()) == sorted(f"cl-run-{r}" for r in range(RUNS))
    assert store.due_pending() == []
    assert len(slots_of) == RUNS
    print(
        f"cluster: {sum(o.status is InvocationStatus.READY for o in outcomes)}/"
        f"{len(outcomes)} READY over {len(owners)} nodes"
    )


def test_the_reaper_finds_due_calls_on_every_node(cluster: list[RedisServer]) -> None:
    store = RedisCanonicalStore.from_url(cluster[1].url, ttl_s=600, cluster=True)
    due = [CanonicalKey(run_id=f"cl-due-{n}", tool_call_id="c1") for n in range(RUNS)]
    for key in due:
        store.create(key, **create_terms(tool_name="lookup", max_pending_s=0))
    time.sleep(0.05)
    assert sorted(store.due_pending(), key=str) == sorted(due, key=str)


def test_the_cli_reads_runs_records_and_facts_on_the_cluster(
    cluster: list[RedisServer],
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    env |= {
        "TOOL_BOUNDARY_REDIS_URL": cluster[2].url,
        "TOOL_BOUNDARY_REDIS_CLUSTER": "true",
        "TOOL_BOUNDARY_TOOLS": "tests.support.celery_tools:registry",
        "PYTHONPATH": str(ROOT),
    }
    script = Path(sys.executable).with_name("tool-boundary")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    store = RedisCanonicalStore.from_url(cluster[2].url, ttl_s=600, cluster=True)
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    for r in range(RUNS):
        boundary.invoke(_call(_run(100 + r), 0), _run(100 + r), timeout=30)
    listed = cli("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    for r in range(RUNS):
        assert f"cl-run-{100 + r}" in listed.stdout
        shown = cli("show", f"cl-run-{100 + r}", "c0", "--json")
        assert shown.returncode == 0 and "READY" in shown.stdout, shown.stderr
        observed = cli("observe", f"cl-run-{100 + r}", "--json")
        assert observed.returncode == 0 and '"c0"' in observed.stdout, observed.stderr


@pytest.mark.slow
def test_a_celery_worker_and_reproject_work_on_the_cluster(
    cluster: list[RedisServer], tmp_path: Path
) -> None:
    from tasks import CeleryDispatcher
    from tasks.wiring.app import create_app
    from tests.celery.workers import celery_process, settings_env, worker_args
    from tests.conftest import celery_test_settings
    from tests.support.servers import redis_server

    with redis_server(tmp_path / "broker") as broker:
        # Given workers whose store is the cluster (broker and results on a plain Redis)
        settings = celery_test_settings(
            redis_url=cluster[0].url,
            redis_cluster=True,
            broker_url=broker.url,
            result_backend=broker.url.replace("/0", "/1"),
        )
        store = RedisCanonicalStore.from_url(cluster[0].url, ttl_s=600, cluster=True)
        app = create_app(settings, name="tests_cluster")
        boundary = ToolBoundary(store=store, registry=registry, dispatcher=CeleryDispatcher(app))
        with celery_process(settings, *worker_args("cluster"), log=tmp_path / "w.log"):
            # When calls of runs on every node go through Celery
            runs = [_run(200 + r) for r in range(RUNS)]
            outcomes = [boundary.invoke(_call(run, 0), run, timeout=60) for run in runs]
            # Then they end READY
            assert all(o.status is InvocationStatus.READY for o in outcomes), outcomes
            # And the CLI re-projects those runs through the worker
            script = Path(sys.executable).with_name("tool-boundary")
            done = subprocess.run(
                [str(script), "reproject", *(a for run in runs for a in ("--run", run.run_id))],
                capture_output=True,
                text=True,
                env=settings_env(settings),
                timeout=120,
                check=False,
            )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == RUNS
        assert all('"c0"' in line for line in lines)


def test_the_start_up_check_reads_every_primary_of_the_cluster(
    cluster: list[RedisServer],
) -> None:
    from boundary import ConfigurationError
    from tasks.worker.server_check import check_store_server
    from tests.conftest import celery_test_settings

    # Given a store on the cluster, whose nodes keep nothing on disk (appendonly no, save "")
    store = RedisCanonicalStore.from_url(cluster[0].url, ttl_s=600, cluster=True)
    settings = celery_test_settings(redis_url=cluster[0].url, redis_cluster=True)
    facts = store.server_facts()
    # Then the check sees the cluster: not evicting, not persistent (a warning)
    assert facts is not None and not facts.evicts and not facts.persistent
    assert any("no persistence" in w for w in check_store_server(store, settings))
    # When one node (not the one named by the URL) evicts, the worker must not start
    node = cluster[2].client()
    node.config_set("maxmemory-policy", "allkeys-lru")
    try:
        evicting = store.server_facts()
        assert evicting is not None and evicting.maxmemory_policy == "allkeys-lru"
        with pytest.raises(ConfigurationError, match="allkeys-lru"):
            check_store_server(store, settings)
    finally:
        node.config_set("maxmemory-policy", "noeviction")
        node.close()


def test_runs_are_listed_from_the_runs_index_on_the_cluster_not_by_scan(
    cluster: list[RedisServer],
) -> None:
    # Given runs created on the cluster, and a run key that no create indexed
    store = RedisCanonicalStore.from_url(cluster[1].url, ttl_s=600, cluster=True)
    created = [CanonicalKey(run_id=f"cl-listed-{n}", tool_call_id="c1") for n in range(RUNS)]
    for key in created:
        store.create(key, **create_terms(tool_name="lookup"))
    store.client.hset(keys.budget_key("cl-unindexed"), "calls", 1)
    # When the runs are listed
    listed = set(store.run_ids())
    # Then the created runs come from the index (scored by their records' expiry); the
    # unindexed run key, which a SCAN would find, is not listed
    indexed = dict(store.client.zrange(keys.RUNS, 0, -1, withscores=True))
    assert {key.run_id for key in created} <= listed <= set(indexed)
    assert "cl-unindexed" not in listed
    assert "cl-unindexed" in set(store.scanned_run_ids())
    assert 0 < store.client.pttl(keys.RUNS) <= 600_000


def test_a_store_url_naming_a_cluster_node_works_without_the_cluster_setting(
    cluster: list[RedisServer], redis_client: object
) -> None:
    from tasks.settings import Settings
    from tests.conftest import redis_url

    # Given a call on the cluster
    store = RedisCanonicalStore.from_url(cluster[1].url, ttl_s=600, cluster=True)
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    run = _run(300)
    assert boundary.invoke(_call(run, 0), run, timeout=30).status is InvocationStatus.READY
    # When the CLI is pointed at a node that does not hold it, TOOL_BOUNDARY_REDIS_CLUSTER unset
    key = keys.record_key(CanonicalKey(run_id=run.run_id, tool_call_id="c0"))
    holder = store.client.get_node_from_key(key).port
    other = next(server for server in cluster if server.port != holder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    env |= {
        "TOOL_BOUNDARY_REDIS_URL": other.url,
        "TOOL_BOUNDARY_TOOLS": "tests.support.celery_tools:registry",
        "PYTHONPATH": str(ROOT),
    }
    script = Path(sys.executable).with_name("tool-boundary")
    shown = subprocess.run(
        [str(script), "show", run.run_id, "c0", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    # Then it found out at start: the record is read across the cluster
    assert shown.returncode == 0 and "READY" in shown.stdout, shown.stderr
    assert Settings(redis_url=cluster[2].url).store_is_cluster()
    # And a plain Redis stays plain, an explicit setting wins
    assert not Settings(redis_url=redis_url(0)).store_is_cluster()
    assert not Settings(redis_url=cluster[2].url, redis_cluster=False).store_is_cluster()
