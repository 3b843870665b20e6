"""Calls still running (PROJECTING, not yet indexed) are counted as ``projecting`` by every
reader of a run's facts: ``observe``, ``aobserve``, the batch reader and the CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import redis

from boundary import RedisCanonicalStore, ToolBoundary, ToolRegistry
from tasks.views import observe_run, observe_runs
from tests.celery.workers import ROOT
from tests.conftest import STORE_DB, redis_url
from tests.integration.test_process_failures import clean_env
from tests.support.helpers import RUN_ID, create_projecting, envelope, make_run, register

RUN = make_run()


def test_a_run_whose_calls_all_run_counts_them_projecting(
    boundary: ToolBoundary, store: RedisCanonicalStore
) -> None:
    # Given two accepted calls that no worker has finished
    create_projecting(store, "c1")
    create_projecting(store, "c2")

    # When the run is observed, by each reader
    facts = boundary.observe(RUN)
    batch = observe_runs(store, [RUN_ID])[0]

    # Then no fact, and both are counted as projecting
    assert facts.facts == ()
    assert facts.excluded == {"projecting": 2}
    assert observe_run(store, RUN_ID) == facts
    assert batch["excluded"] == {"projecting": 2}
    assert asyncio.run(boundary.aobserve(RUN)) == facts


def test_running_calls_are_counted_once_and_facts_keep_acceptance_order(
    boundary: ToolBoundary, registry: ToolRegistry, store: RedisCanonicalStore
) -> None:
    # Given c1 READY, c2 still running, c3 READY
    register(registry)
    boundary.invoke(envelope("c1", {"query": "timeout"}), RUN, timeout=5)
    create_projecting(store, "c2")
    boundary.invoke(envelope("c3", {"query": "timeout"}), RUN, timeout=5)

    facts = boundary.observe(RUN)

    assert [fact.tool_call_id for fact in facts.facts] == ["c1", "c3"]
    assert facts.excluded == {"projecting": 1}


def test_the_cli_says_how_many_calls_are_still_running(
    redis_client: redis.Redis, store: RedisCanonicalStore
) -> None:
    create_projecting(store, "c1")
    create_projecting(store, "c2")

    done = subprocess.run(
        [str(Path(sys.executable).with_name("tool-boundary")), "observe", RUN_ID],
        cwd=ROOT,
        env=clean_env(TOOL_BOUNDARY_REDIS_URL=redis_url(STORE_DB)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "excluded: projecting 2" in done.stdout
