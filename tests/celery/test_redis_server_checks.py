"""The store's Redis as operators leave it: an evicting maxmemory-policy stops a worker at
start with one line; no persistence is a warning (or a refusal when required); with AOF, a
restart keeps records, duplicate marks and budgets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from celery import Celery

from bench.rig.workers import celery_command
from boundary import (
    CanonicalKey,
    ErrorCode,
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks.runtime import get_runtime
from tests.celery.workers import ROOT, celery_process, settings_env, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, redis_url
from tests.support.servers import redis_server


def _worker_exit(store_url: str, tmp_path: Path, **overrides: object) -> tuple[int, str]:
    settings = celery_test_settings(
        redis_url=store_url, broker_url=redis_url(SUBPROCESS_BROKER_DB), **overrides
    )
    done = subprocess.run(
        celery_command("tasks", *worker_args("check")),
        cwd=ROOT,
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_worker_refuses_an_evicting_store_with_one_line(tmp_path: Path) -> None:
    with redis_server(
        tmp_path / "lru", "--maxmemory", "50mb", "--maxmemory-policy", "allkeys-lru"
    ) as server:
        code, output = _worker_exit(server.url, tmp_path)
    assert code == 2, output
    lines = [line for line in output.splitlines() if "maxmemory-policy" in line]
    assert len(lines) == 1, output
    assert "allkeys-lru" in lines[0] and "noeviction" in lines[0]
    assert "Traceback" not in output


def test_a_worker_refuses_a_store_without_persistence_when_it_is_required(
    tmp_path: Path,
) -> None:
    with redis_server(tmp_path / "volatile", "--appendonly", "no") as server:
        code, output = _worker_exit(server.url, tmp_path, require_persistence=True)
    assert code == 2, output
    assert sum("no persistence" in line for line in output.splitlines()) == 1


def test_a_worker_warns_once_about_a_store_without_persistence(
    tmp_path: Path, celery_session_app: Celery
) -> None:
    with redis_server(tmp_path / "volatile", "--appendonly", "no") as server:
        settings = celery_test_settings(
            redis_url=server.url, broker_url=redis_url(SUBPROCESS_BROKER_DB)
        )
        log = tmp_path / "w.log"
        with celery_process(settings, *worker_args("warned"), log=log):
            pass
    assert sum("no persistence" in line for line in log.read_text().splitlines()) == 1


def test_with_aof_a_restart_keeps_records_duplicates_and_budgets(
    tmp_path: Path, celery_session_app: Celery
) -> None:
    registry = get_runtime().registry
    run = RunContext(
        run_id="run-aof",
        authorized_tools=frozenset({"lookup"}),
        max_tool_calls=3,
        max_calls_per_tool={"lookup": 2},
    )

    def call(call_id: str) -> ToolCallEnvelope:
        return ToolCallEnvelope(
            run_id="run-aof", tool_call_id=call_id, tool_name="lookup", arguments={"query": "x"}
        )

    with redis_server(tmp_path / "aof", "--appendonly", "yes", "--appendfsync", "always") as server:
        store = RedisCanonicalStore.from_url(server.url, ttl_s=600)
        boundary = ToolBoundary(
            store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
        )
        # Given a run that used its per-tool budget
        for call_id in ("c1", "c2"):
            assert boundary.invoke(call(call_id), run, timeout=10).status is InvocationStatus.READY
        before = store.get(CanonicalKey(run_id="run-aof", tool_call_id="c1"))
        assert store.server_facts() is not None and store.server_facts().aof
        # When Redis restarts
        server.restart()
        # Then the records are there, a used id is still a duplicate, the budget still spent
        assert store.get(CanonicalKey(run_id="run-aof", tool_call_id="c1")) == before
        assert boundary.submit(call("c1"), run).outcome.error_code is ErrorCode.DUPLICATE_TOOL_CALL
        spent = boundary.submit(call("c3"), run).outcome
        assert spent.error_code is ErrorCode.TOOL_BUDGET_EXHAUSTED
        assert [f.tool_call_id for f in boundary.observe(run).facts] == ["c1", "c2"]


@pytest.fixture(autouse=True)
def _runtime(celery_session_app: Celery) -> None:
    """The Celery tests' runtime (their tools)."""
