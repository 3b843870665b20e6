"""A worker killed after the raw response was kept but before the record was sealed: the
reaper projects the kept response again instead of sealing WORKER_LOST (a chained project
task, ``PROJECT_IN_LINE=false``), or the execute task's own retry after the worker loss
projects it (in line, the default); and a project step whose store fails under it is sent
again instead of waiting for the reaper."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import CanonicalKey, InvocationStatus, RedisCanonicalStore, ToolBoundary
from boundary import ToolCallEnvelope as Call
from boundary.reaper import reap_once
from boundary.store import ReapDecision
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import PROJECT, PROJECTIONS_QUEUE, create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.helpers import create_terms, wait_until
from tests.support.servers import redis_server


@pytest.fixture
def isolated(
    request: pytest.FixtureRequest, redis_client: redis.Redis, celery_session_app: Celery
) -> Iterator[tuple[Settings, Celery, ToolBoundary]]:
    """A boundary over a worker subprocess on a broker DB of its own; its workers send the
    chained project task (the reaper's re-projection is what these tests watch) unless the
    test's parameter says True."""
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB),
        max_pending_s=1,
        reap_grace_s=0.5,
        project_in_line=getattr(request, "param", False),
    )
    broker = flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_reproject")
    boundary = get_runtime().boundary(CeleryDispatcher(app))
    boundary.max_pending_s, boundary.reap_grace_s = 1, 0.5
    yield settings, app, boundary
    broker.flushdb()


def _sender(app: Celery):  # type: ignore[no-untyped-def]
    def send(key: CanonicalKey) -> None:
        ids = (key.run_id, key.tool_call_id)
        app.send_task(PROJECT, args=ids, task_id=key.task_id("project"), queue=PROJECTIONS_QUEUE)

    return send


def _submit_dying_projection(boundary: ToolBoundary, tool_call_id: str, marker: Path) -> None:
    """Submits a call whose projector kills its worker process once (``marker`` then exists)
    after the raw response was kept."""
    call = Call(
        run_id=RUN.run_id,
        tool_call_id=tool_call_id,
        tool_name="dies_projecting",
        arguments={"query": "x", "marker": str(marker)},
    )
    assert boundary.submit(call, RUN).accepted


def test_a_worker_lost_between_raw_and_seal_is_projected_again_and_ends_ready(
    isolated: tuple[Settings, Celery, ToolBoundary], tmp_path: Path
) -> None:
    settings, app, boundary = isolated
    store = get_runtime().store
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="c1")
    marker = tmp_path / "died"
    with celery_process(
        settings, *worker_args("reproj", pool="prefork", concurrency=1), log=tmp_path / "w.log"
    ):
        # Given a call whose projector's process is killed once the raw response is kept
        _submit_dying_projection(boundary, "c1", marker)
        wait_until(marker.exists, "the projector's process to be killed", 30, every=0.1)
        died = time.monotonic()
        time.sleep(0.5)
        record = store.get(key)
        assert record.status is InvocationStatus.PROJECTING and record.raw is not None
        # When the reaper passes (as beat runs it) until the call ends
        reprojected = 0

        def ended() -> bool:
            nonlocal reprojected
            if store.get(key).status is not InvocationStatus.PROJECTING:
                return True
            reprojected += reap_once(
                store, _sender(app), retry_after_s=5, max_reprojections=2
            ).reprojected
            return False

        wait_until(ended, "the reaper to end the call", 60 - (time.monotonic() - died), every=0.3)
        settled = time.monotonic() - died
    # Then the kept raw response was projected: READY, not WORKER_LOST
    sealed = store.get(key)
    assert sealed.status is InvocationStatus.READY, sealed
    assert sealed.raw == record.raw
    assert reprojected == 1
    print(f"kill between raw and seal: READY {settled:.2f}s after the kill")


@pytest.mark.parametrize("isolated", [True], indirect=True)
def test_in_line_a_worker_lost_between_raw_and_seal_is_projected_by_the_execute_retry(
    isolated: tuple[Settings, Celery, ToolBoundary], tmp_path: Path
) -> None:
    settings, _app, boundary = isolated
    store = get_runtime().store
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="c-in-line")
    marker = tmp_path / "died"
    with celery_process(
        settings, *worker_args("reproj-il", pool="prefork", concurrency=1), log=tmp_path / "w.log"
    ):
        # Given a call projected in line whose process is killed once the raw response is
        # kept (its projector kills it, once)
        _submit_dying_projection(boundary, "c-in-line", marker)
        # When no reaper passes: the execute task is sent again after the worker loss
        outcome = boundary.outcome(RUN.run_id, "c-in-line", timeout=60)
    # Then its second run finds the raw response kept, projects it in line: READY
    assert marker.exists()
    assert outcome.status is InvocationStatus.READY, outcome
    sealed = store.get(key)
    assert sealed is not None and sealed.raw is not None


def test_requeue_is_bounded_and_only_for_kept_raw_responses(redis_client: redis.Redis) -> None:
    store = RedisCanonicalStore(client=redis_client, ttl_s=60)
    with_raw = CanonicalKey(run_id="r1", tool_call_id="raw")
    without = CanonicalKey(run_id="r1", tool_call_id="none")
    for key in (with_raw, without):
        store.create(key, **create_terms(tool_name="t", max_pending_s=0))
    store.store_raw(with_raw, '{"hits":[]}')

    def decide(key: CanonicalKey) -> ReapDecision:
        return store.requeue_due(key, retry_after_s=0.001, max_reprojections=2)

    assert [decide(with_raw) for _ in range(3)] == [
        ReapDecision.REPROJECT,
        ReapDecision.REPROJECT,
        ReapDecision.SEAL,
    ]
    assert decide(without) is ReapDecision.SEAL
    store.seal_error(without, __import__("boundary").ErrorCode.WORKER_LOST)
    assert decide(without) is ReapDecision.GONE
    # The record keeps its TTL through the counter's write
    assert 0 < redis_client.pttl("tb:{r1}:call:raw") <= 60_000


def test_a_store_failure_under_the_project_step_resends_it(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    with redis_server(tmp_path / "store", "--appendonly", "yes") as server:
        settings = celery_test_settings(
            redis_url=server.url, broker_url=redis_url(SUBPROCESS_BROKER_DB)
        )
        flush_db(SUBPROCESS_BROKER_DB)
        store = RedisCanonicalStore.from_url(server.url, ttl_s=600)
        registry = get_runtime().registry
        app = create_app(settings, name="tests_store_fail")
        boundary = ToolBoundary(store=store, registry=registry, dispatcher=CeleryDispatcher(app))
        key = CanonicalKey(run_id=RUN.run_id, tool_call_id="c1")
        with celery_process(settings, *worker_args("storefail"), log=tmp_path / "w.log"):
            # Given a call whose projector runs when its store goes away
            call = Call(
                run_id=RUN.run_id,
                tool_call_id="c1",
                tool_name="hung_projector",
                arguments={"query": "x", "hang": 2},
            )
            assert boundary.submit(call, RUN).accepted
            wait_until(
                lambda: (kept := store.get(key)) is not None and kept.raw is not None,
                "the raw response to be kept",
                30,
                every=0.05,
            )
            server.stop()
            # When the store comes back after the step's own retries are spent (the worker
            # says it sent the step again; the wait only fails a hung test)
            log = tmp_path / "w.log"
            wait_until(
                lambda: "sent again" in log.read_text(errors="replace"),
                f"the worker to send the step again (log: {log})",
                60,
                every=0.1,
            )
            server.start()
            back = time.monotonic()
            # Then the step is sent again and the call ends READY without the reaper
            outcome = boundary.outcome(RUN.run_id, "c1", timeout=60)
            settled = time.monotonic() - back
        assert outcome.status is InvocationStatus.READY, outcome
        assert "sent again" in (tmp_path / "w.log").read_text()
        print(f"store failure during project: READY {settled:.2f}s after the store returned")
