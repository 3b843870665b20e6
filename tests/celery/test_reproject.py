"""Run projection and batch reprocessing through a real Celery worker thread, on a real Redis
broker, result backend and store."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from celery import Celery
from typer.testing import CliRunner

import tasks.cli.reproject
import tasks.worker.runs
import tasks.worker.step_store
from boundary import (
    EvidenceStatus,
    InProcessDispatcher,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.store import keys
from tasks.cli.main import EXIT_OK, EXIT_UNAVAILABLE, cli
from tasks.settings import Settings
from tasks.views import observe_run
from tasks.wiring.reproject import DEFAULT_MAX_IN_FLIGHT, ReprojectError, reproject
from tasks.worker.runs import project_run, project_runs
from tests.conftest import BACKEND_DB, BROKER_DB, STORE_DB, redis_url
from tests.support.celery_tools import registry
from tests.support.helpers import binary_client

TOOLS = frozenset(spec.name for spec in registry)
#: A queue no worker consumes, for results that never come.
NOBODY_QUEUE = "tb-test-nobody-listens"


def run_context(run_id: str) -> RunContext:
    return RunContext(run_id=run_id, authorized_tools=TOOLS)


def envelope(run_id: str, call_id: str, tool: str, arguments: dict[str, Any]) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, celery_settings: Settings) -> None:
    """The CLI's settings: the same DBs as the worker's."""
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", celery_settings.store_url)
    monkeypatch.setenv("TOOL_BOUNDARY_BROKER_URL", celery_settings.broker)
    monkeypatch.setenv("TOOL_BOUNDARY_RESULT_BACKEND", celery_settings.backend)


@pytest.fixture
def local(redis_client: redis.Redis) -> ToolBoundary:
    """Writes runs quickly: the same tools and store DB as the worker, steps in-process."""
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    return ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry, inline=True)
    )


def write_run(boundary: ToolBoundary, run_id: str) -> None:
    """A run of two READY calls: one with evidence, one scoped NO_EVIDENCE."""
    run = run_context(run_id)
    for call_id, query in (("c1", "timeouts"), ("c2", "nothing")):
        outcome = boundary.invoke(envelope(run_id, call_id, "lookup", {"query": query}), run)
        assert outcome.error_code is None


# --- the task ---------------------------------------------------------------------------------


def test_project_run_through_the_worker_returns_the_runs_facts(
    celery_boundary: ToolBoundary,
) -> None:
    run = run_context("run-p1")
    for call_id, tool, query in (
        ("c1", "lookup", "timeouts"),
        ("c2", "lookup", "nothing"),
        ("c3", "boom", "x"),
    ):
        celery_boundary.invoke(envelope(run.run_id, call_id, tool, {"query": query}), run, 30)

    line = project_run.delay(run.run_id).get(timeout=30)

    assert line == celery_boundary.observe(run).model_dump(mode="json")
    assert [f["tool_call_id"] for f in line["facts"]] == ["c1", "c2"]
    assert line["facts"][1]["evidence_status"] == EvidenceStatus.NO_EVIDENCE.value
    assert line["facts"][1]["scope"] == {"query": "nothing"}
    assert line["excluded"] == {"error": 1}


def test_slow_first_call_and_fast_second_call_keep_acceptance_order(
    celery_boundary: ToolBoundary,
) -> None:
    # Given a slow first call and a fast second call, running at once on the worker
    run = run_context("run-order")
    slow = celery_boundary.submit(
        envelope(run.run_id, "c-slow", "sleepy", {"seconds": 1.0, "n": 1}), run
    )
    fast = celery_boundary.submit(
        envelope(run.run_id, "c-fast", "lookup", {"query": "timeouts"}), run
    )
    assert slow.accepted and fast.accepted
    assert celery_boundary.outcome(run.run_id, "c-fast", timeout=30).error_code is None
    assert celery_boundary.outcome(run.run_id, "c-slow", timeout=30).error_code is None
    store = celery_boundary.store
    assert slow.key is not None and fast.key is not None
    slow_record, fast_record = store.get(slow.key), store.get(fast.key)
    assert slow_record is not None and fast_record is not None
    assert fast_record.updated_at < slow_record.updated_at  # the fast one completed first

    # When the run is projected by the worker
    line = project_run.delay(run.run_id).get(timeout=30)

    # Then the facts follow acceptance order, not completion order
    assert [f["tool_call_id"] for f in line["facts"]] == ["c-slow", "c-fast"]


def test_project_runs_through_the_worker_gives_each_runs_line_in_order(
    celery_boundary: ToolBoundary, local: ToolBoundary
) -> None:
    # Given two runs, and a chunk that names them with an unknown and an unsafe id
    for run_id in ("run-a", "run-b"):
        write_run(local, run_id)
    chunk = ["run-b", "run-nobody", "run{x}", "run-a"]

    # When the chunk is projected by the worker as one task
    lines = json.loads(project_runs.delay(chunk).get(timeout=30))

    # Then one line per id, in order: each what observe gives, the unsafe one an error
    store = local.store
    assert lines[0] == observe_run(store, "run-b").model_dump(mode="json")
    assert lines[1] == {"run_id": "run-nobody", "facts": [], "excluded": {}, "omitted": 0}
    assert lines[2] == {"run_id": None, "error": "INVALID_RUN_ID"}
    assert lines[3] == observe_run(store, "run-a").model_dump(mode="json")
    assert [len(line["facts"]) for line in (lines[0], lines[3])] == [2, 2]


@pytest.fixture
def unreachable_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime's store is on a closed port, behind a password that must never be logged."""
    store = RedisCanonicalStore.from_url(
        "redis://:hunter2-pw@127.0.0.1:1/0", socket_connect_timeout=0.2
    )
    monkeypatch.setattr(tasks.worker.runs, "get_runtime", lambda: SimpleNamespace(store=store))
    monkeypatch.setattr(tasks.worker.step_store, "STORE_RETRY_DELAY_S", 0.01)


@pytest.mark.usefixtures("unreachable_store")
def test_project_runs_never_lets_a_store_failure_escape(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        lines = json.loads(project_runs(["run-1", "run{2}"]))

    assert lines == [
        {"run_id": "run-1", "error": "STORE_UNAVAILABLE"},
        {"run_id": None, "error": "STORE_UNAVAILABLE"},
    ]
    assert "StoreUnavailable" in caplog.text
    assert "hunter2" not in caplog.text


def test_project_run_of_an_unsafe_id_returns_an_error_line() -> None:
    assert project_run("run{1}") == {"run_id": None, "error": "INVALID_RUN_ID"}


@pytest.mark.usefixtures("unreachable_store")
def test_project_run_never_lets_a_store_failure_escape(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        line = project_run("run-1")

    assert line == {"run_id": "run-1", "error": "STORE_UNAVAILABLE"}
    assert "StoreUnavailable" in caplog.text
    assert "hunter2" not in caplog.text


# --- reprocessing -----------------------------------------------------------------------------


def record_snapshot(redis_client: redis.Redis) -> dict[bytes, tuple[dict[bytes, bytes], int]]:
    """Every record's fields, byte for byte, and its remaining TTL in ms."""
    client = binary_client(redis_client)
    try:
        names = sorted(client.scan_iter(match=b"tb:{*}:call:*", count=1000))
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(name)
            pipe.pttl(name)
        replies = pipe.execute()
    finally:
        client.close()
    return {name: (replies[2 * i], replies[2 * i + 1]) for i, name in enumerate(names)}


@pytest.mark.slow
def test_reprocessing_1000_runs_writes_1000_lines_and_changes_no_record(
    celery_boundary: ToolBoundary,
    local: ToolBoundary,
    redis_client: redis.Redis,
    cli_env: None,
    tmp_path: Path,
) -> None:
    # Given 1,000 runs of two READY calls, one call deleted in every tenth run
    run_ids = [f"run-{i:04d}" for i in range(1000)]
    for run_id in run_ids:
        write_run(local, run_id)
    redis_client.delete(
        *(f"tb:{{{run_id}}}:call:c2" for i, run_id in enumerate(run_ids) if i % 10 == 0)
    )
    keys_before = set(redis_client.scan_iter(match="*", count=1000))
    records_before = record_snapshot(redis_client)
    progress_before = {r: redis_client.zrange(keys.progress_key(r), 0, -1) for r in run_ids}
    assert len(records_before) == 1900

    # When every run is reprocessed through the worker
    out = tmp_path / "facts.jsonl"
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["reproject", "--all", "--out", str(out), "--json"])
    elapsed = time.monotonic() - started

    # Then one line per run, each what observe gives, and a summary
    assert result.exit_code == EXIT_OK, result.output
    lines = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    assert [line["run_id"] for line in lines] == run_ids
    store = local.store
    for line in lines[:50]:
        assert line == observe_run(store, line["run_id"]).model_dump(mode="json")
    summary = json.loads(result.stdout)
    assert summary | {"elapsed_s": 0} == {
        "runs": 1000,
        "projected": 1000,
        "failed": {},
        "facts": 1900,
        "evidence": 1000,
        "negative": 900,
        "excluded": {"missing": 100},
        "omitted": 0,
        "elapsed_s": 0,
    }
    print(f"reproject --all: 1,000 runs in {elapsed:.2f}s")
    # And no record, no key, no index changed; TTLs only ran down
    records_after = record_snapshot(redis_client)
    assert records_after.keys() == records_before.keys()
    for name, (fields, ttl) in records_before.items():
        fields_after, ttl_after = records_after[name]
        assert fields_after == fields, name
        assert 0 < ttl_after <= ttl, name
    assert set(redis_client.scan_iter(match="*", count=1000)) == keys_before
    assert {r: redis_client.zrange(keys.progress_key(r), 0, -1) for r in run_ids} == (
        progress_before
    )


def test_a_long_batch_keeps_no_collected_chunk_in_the_clients_result_buffer(
    celery_boundary: ToolBoundary, local: ToolBoundary, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run, reprocessed as many one-run chunks (their ids recorded as they are sent)
    from tasks.wiring.app import app

    write_run(local, "run-a")
    sent: list[str] = []
    send_task = app.send_task

    def recorded(*args: Any, **kwargs: Any) -> Any:
        result = send_task(*args, **kwargs)
        sent.append(result.id)
        return result

    monkeypatch.setattr(app, "send_task", recorded)
    buffered: list[int] = []
    subscribed: list[int] = []

    def drained() -> None:
        # Called as each chunk is collected: count what the client keeps (only the messages of
        # chunks still in flight may be there), then take in the messages that came since: a
        # chunk read from its key first gets its message late, at the client's next wait.
        buffered.append(len(set(app.backend._pending_messages) & set(sent)))
        app.backend.result_consumer.drain_events(timeout=0.05)
        # Redis's own count of subscribers on the result channels of the chunks sent so far
        channels = [app.backend.get_key_for_task(task_id) for task_id in sent]
        subscribed.append(sum(n for _, n in app.backend.client.pubsub_numsub(*channels)))

    # When the batch is read to the end
    lines = list(reproject(["run-a"] * 60, chunk_size=1, celery_app=app, on_done=drained))

    # Then every line came back, and the client kept no more messages than chunks in flight
    # (DEFAULT_MAX_IN_FLIGHT)
    # (a batch of a million records would otherwise hold thousands of chunks' lines)
    assert len(lines) == 60 and all(len(line["facts"]) == 2 for line in lines)
    assert len(sent) == 60 and len(buffered) == 60
    assert max(buffered) <= DEFAULT_MAX_IN_FLIGHT, buffered
    # And at no collection had any chunk sent so far a subscriber on its result channel
    # (Celery's send subscribes; held, the subscription brings each chunk's lines again, on a
    # connection the CLI never reads)
    assert subscribed == [0] * 60


def test_a_long_batch_s_own_bookkeeping_of_collected_chunks_stays_bounded(
    celery_boundary: ToolBoundary, local: ToolBoundary, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run, reprocessed as many one-run chunks, two at a time, by a client whose
    # batch is watched
    import tasks.wiring.reproject as wiring
    from tasks.wiring.app import app

    write_run(local, "run-a")
    batches: list[Any] = []

    class Watched(wiring._Batch):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            batches.append(self)

    monkeypatch.setattr(wiring, "_Batch", Watched)
    kept: list[int] = []

    def counted() -> None:
        # What the client itself keeps of the chunks it collected, as each is collected
        batch = batches[0]
        kept.append(sum(len(v) for v in vars(batch).values() if isinstance(v, set | dict)))
        kept[-1] += sum(len(v) for v in vars(batch).values() if isinstance(v, list | deque))
        app.backend.result_consumer.drain_events(timeout=0.05)

    # When the batch is read to the end
    lines = list(
        reproject(["run-a"] * 40, chunk_size=1, max_in_flight=2, celery_app=app, on_done=counted)
    )

    # Then every line came back, and the client never kept more than a few chunks (two
    # waits' worth of those in flight), not one per chunk collected
    assert len(lines) == 40 and all(len(line["facts"]) == 2 for line in lines)
    assert len(kept) == 40 and max(kept) <= 2 * 2, kept


def test_reproject_writes_the_given_runs_to_stdout_in_order(
    celery_boundary: ToolBoundary, local: ToolBoundary, cli_env: None
) -> None:
    for run_id in ("run-a", "run-b", "run-c"):
        write_run(local, run_id)

    result = CliRunner().invoke(
        cli, ["reproject", "--run", "run-c", "--run", "run-a", "--run", "run-c"]
    )

    assert result.exit_code == EXIT_OK, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["run_id"] for line in lines] == ["run-c", "run-a"]
    assert "reprocessed" in result.stderr  # the human summary stays off stdout


def test_reproject_json_summary_goes_to_stderr_when_lines_go_to_stdout(
    celery_boundary: ToolBoundary, local: ToolBoundary, cli_env: None
) -> None:
    write_run(local, "run-a")

    result = CliRunner().invoke(cli, ["reproject", "--run", "run-a", "--json"])

    assert result.exit_code == EXIT_OK, result.output
    assert json.loads(result.stdout)["run_id"] == "run-a"
    summary = json.loads(result.stderr)
    assert (summary["runs"], summary["facts"], summary["negative"]) == (1, 2, 1)


def test_reproject_of_no_runs_is_an_empty_success(
    celery_boundary: ToolBoundary, cli_env: None
) -> None:
    result = CliRunner().invoke(cli, ["reproject", "--all", "--json"])

    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout == ""
    assert json.loads(result.stderr)["runs"] == 0


def clear_queue(name: str) -> None:
    client = redis.Redis.from_url(redis_url(BROKER_DB))
    try:
        client.delete(name, f"_kombu.binding.{name}")
    finally:
        client.close()


def test_runs_whose_results_never_come_are_reported_timed_out(
    celery_boundary: ToolBoundary,
    local: ToolBoundary,
    celery_session_app: Celery,
    cli_env: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a batch sent where no worker listens
    write_run(local, "run-a")
    unheard = functools.partial(reproject, queue=NOBODY_QUEUE)
    monkeypatch.setattr(tasks.cli.reproject, "reproject", unheard)
    try:
        # When it is reprocessed with a short wait
        started = time.monotonic()
        result = CliRunner().invoke(
            cli, ["reproject", "--run", "run-a", "--timeout", "0.5", "--json"]
        )
        waited = time.monotonic() - started
    finally:
        clear_queue(NOBODY_QUEUE)

    # Then the wait was bounded (nobody answers: only the --timeout ends it), the run's line
    # says so, and the exit code is 3
    print(f"reproject --timeout 0.5 with no worker: {waited:.2f}s")
    assert result.exit_code == EXIT_UNAVAILABLE
    assert json.loads(result.stdout) == {"run_id": "run-a", "error": "TIMED_OUT"}
    assert json.loads(result.stderr)["failed"] == {"TIMED_OUT": 1}


def test_an_unreachable_broker_raises_reproject_error() -> None:
    unreachable = Celery("tb-test-unreachable")
    unreachable.conf.update(
        broker_url="redis://:hunter2-pw@127.0.0.1:1/0",
        result_backend=redis_url(BACKEND_DB),
        broker_connection_timeout=0.5,
        broker_connection_retry=False,
        task_publish_retry_policy={"max_retries": 0},
    )

    with pytest.raises(ReprojectError) as raised:
        list(reproject(["run-a"], celery_app=unreachable))

    assert raised.value.part == "broker"
    assert "hunter2" not in str(raised.value)


def test_a_result_backend_failing_as_a_chunk_goes_out_raises_reproject_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a client whose result backend fails as it withdraws a sent chunk's subscription
    app = Celery("tb-test-backend-down")
    app.conf.update(broker_url=redis_url(BROKER_DB), result_backend=redis_url(BACKEND_DB))

    def down(result: Any) -> Any:
        raise redis.ConnectionError("Error connecting to redis://:hunter2-pw@10.0.0.9:6379/13")

    monkeypatch.setattr(app.backend, "remove_pending_result", down)

    # When a batch is sent (to a queue nobody consumes, emptied afterwards)
    try:
        with pytest.raises(ReprojectError) as raised:
            list(reproject(["run-a"], celery_app=app, queue="tb-test-nobody"))
    finally:
        redis.Redis.from_url(redis_url(BROKER_DB)).delete("tb-test-nobody")

    # Then the error names the part that failed, and none of the driver's text
    assert raised.value.part == "result backend"
    assert "hunter2" not in str(raised.value) and raised.value.__cause__ is None


def test_store_db_is_the_workers(celery_settings: Settings) -> None:
    # The CLI's and the worker's store must be the same DB for these tests to mean anything.
    assert celery_settings.store_url == redis_url(STORE_DB)
