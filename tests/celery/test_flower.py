"""A real Flower over a real worker: a running call's progress shows on its execute task, and
Flower's Broker API counts the messages of the ``tools``, ``long`` and ``projections`` queues.

Flower and the worker run as ``celery -A tasks ...`` subprocesses on a broker DB of their
own; the test reads Flower only through its HTTP API, as a monitoring script would.
"""

from __future__ import annotations

import ast
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from boundary import CanonicalKey, InvocationStatus, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import LONG_QUEUE, PROJECTIONS_QUEUE, REAP, TOOLS_QUEUE, create_app
from tests.celery.conftest import RUN
from tests.celery.test_leaks_and_concurrency import wait_until_flower_sees_events
from tests.celery.workers import celery_process
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.helpers import wait_until
from tests.support.servers import free_port, release_port

#: Seconds any wait of these tests may take (a loaded machine, a cold Flower).
WAIT_S = 45.0


@dataclass
class Monitored:
    api: str
    boundary: ToolBoundary
    broker: redis.Redis
    settings: Settings


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def wait_for(what: str, probe: Any) -> Any:
    """Calls ``probe`` until it answers something true (a probe that fails counts as not
    yet); returns that."""

    def answered() -> Any:
        try:
            return probe()
        except (urllib.error.URLError, OSError, KeyError, ValueError):
            return None

    return wait_until(answered, what, WAIT_S, every=0.2)


@pytest.fixture(scope="module")
def monitored(
    tmp_path_factory: pytest.TempPathFactory, celery_session_app: Celery
) -> Iterator[Monitored]:
    """One worker (threads, concurrency 1: a second message waits in its queue) on the three
    queues, and Flower, both on the subprocess broker DB."""
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))
    broker = flush_db(SUBPROCESS_BROKER_DB)
    logs = tmp_path_factory.mktemp("flower")
    port = free_port()
    worker = (
        "worker", "-P", "threads", "-c", "1", "-Q",
        f"{TOOLS_QUEUE},{LONG_QUEUE},{PROJECTIONS_QUEUE}",
        "-n", "flower-test@%h", "-l", "INFO", "--without-mingle", "--without-gossip",
    )  # fmt: skip
    flower = ("flower", f"--port={port}", "--address=127.0.0.1")
    try:
        with (
            celery_process(settings, *worker, log=logs / "worker.log"),
            celery_process(
                settings,
                *flower,
                ready_text="Visit me at",
                log=logs / "flower.log",
                extra_env={"FLOWER_UNAUTHENTICATED_API": "true"},
            ),
        ):
            app = create_app(settings, name="tests_flower")
            boundary = get_runtime().boundary(CeleryDispatcher(app))
            api = f"http://127.0.0.1:{port}/api"
            # Flower says it is up before its event receiver listens: calls until it sees one.
            wait_until_flower_sees_events(boundary, api)
            yield Monitored(api, boundary, broker, settings)
    finally:
        release_port(port)
        broker.flushdb()


def call(monitored: Monitored, call_id: str, tool: str, arguments: dict[str, Any]) -> None:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )
    assert monitored.boundary.submit(envelope, RUN).accepted


def test_a_running_calls_heartbeat_shows_in_flower_as_progress(
    monitored: Monitored, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # Given a tool that reports progress for about 6 s (30 steps of 0.2 s)
    call(monitored, "flower-beat", "beating_once", {"steps": 30, "step_s": 0.2})
    task_id = f"{RUN.run_id}:flower-beat:execute"

    # When Flower's task API is read while it runs
    def in_progress() -> dict[str, Any] | None:
        info = get_json(f"{monitored.api}/task/info/{task_id}")
        return info if info.get("state") == "PROGRESS" else None

    info = wait_for("the execute task in state PROGRESS", in_progress)
    # Then the task carries the heartbeat: fraction, message and attempt
    details = json.loads(info["result"])
    assert set(details) == {"progress", "progress_message", "attempt"}
    assert 0.0 <= details["progress"] < 1.0
    assert details["progress_message"].startswith("step ")
    assert details["progress_message"].endswith(" of 30")
    assert details["attempt"] == 1
    # And what Flower shows of the task is its name and the ids, nothing of the arguments
    assert info["name"] == "tool_boundary.execute"
    assert info["args"] == f"('{RUN.run_id}', 'flower-beat')"
    assert "step_s" not in json.dumps(info)

    # And the progress moves on while the call runs
    def moved() -> bool:
        later = get_json(f"{monitored.api}/task/info/{task_id}")
        return later.get("state") != "PROGRESS" or json.loads(later["result"]) != details

    wait_for("a later progress event", moved)
    # And once the call ends, the task's end replaces the progress
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="flower-beat")
    outcome = monitored.boundary.outcome(key.run_id, key.tool_call_id, timeout=WAIT_S)
    assert outcome.status is InvocationStatus.READY
    done = wait_for(
        "the execute task SUCCESS",
        lambda: (i := get_json(f"{monitored.api}/task/info/{task_id}"))["state"] == "SUCCESS" and i,
    )
    # (the chain, the default: the execute task kept the raw response; its project task
    # projected it)
    assert ast.literal_eval(done["result"]) == "STORED"


def _succeeded(monitored: Monitored, task_id: str) -> dict[str, Any] | None:
    info = get_json(f"{monitored.api}/task/info/{task_id}")
    return info if info.get("state") == "SUCCESS" else None


def test_flower_shows_both_tasks_of_a_ready_call_with_the_chain_on(monitored: Monitored) -> None:
    # Given the default settings: the chain (no in-line projection)
    assert celery_test_settings().project_in_line is False
    # When a call ends READY
    call(monitored, "flower-chain", "lookup", {"query": "chain"})
    outcome = monitored.boundary.outcome(RUN.run_id, "flower-chain", timeout=WAIT_S)
    assert outcome.status is InvocationStatus.READY
    # Then Flower lists its execute task and its project task, both succeeded
    execute_id = f"{RUN.run_id}:flower-chain:execute"
    project_id = f"{RUN.run_id}:flower-chain:project"
    execute = wait_for("the execute task SUCCESS", lambda: _succeeded(monitored, execute_id))
    project = wait_for("the project task SUCCESS", lambda: _succeeded(monitored, project_id))
    assert execute["name"] == "tool_boundary.execute"
    assert project["name"] == "tool_boundary.project"
    # And the execute task only kept the raw response; the project task shows the bounded
    # outcome, and neither shows more than the ids as its arguments
    assert ast.literal_eval(execute["result"]) == "STORED"
    shown = ast.literal_eval(project["result"])
    assert shown == outcome.model_dump(mode="json"), shown
    assert execute["args"] == project["args"] == f"('{RUN.run_id}', 'flower-chain')"
    # And the project task came from the execute task (the chain, one root), and its
    # task-sent event reached Flower too (sent by the execute task)
    assert project["root_id"] == project["parent_id"] == execute_id
    wait_for("the project task's task-sent event", lambda: task_info(monitored, project_id)["sent"])


def test_flowers_broker_api_counts_each_queues_messages(
    monitored: Monitored, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # Given the worker's one slot held by a running call
    call(monitored, "flower-busy", "sleepy", {"seconds": 6, "started": str(tmp_path / "on")})
    wait_for("the held call to start", (tmp_path / "on").exists)
    # And messages waiting behind it: three on "tools", two on "long"
    for n in range(3):
        call(monitored, f"flower-tools-{n}", "lookup", {"query": f"q{n}"})
    for n in range(2):
        call(monitored, f"flower-long-{n}", "long_lookup", {"query": f"q{n}"})
    assert monitored.broker.llen(TOOLS_QUEUE) == 3
    assert monitored.broker.llen(LONG_QUEUE) == 2

    # When Flower's queue lengths are read, once it knows the worker's queues (until its
    # inspection of the worker answers, it lists every queue of the app's configuration)
    def lengths() -> dict[str, int] | None:
        answer = get_json(f"{monitored.api}/queues/length")
        found = {q["name"]: q["messages"] for q in answer["active_queues"]}
        consumed = {TOOLS_QUEUE, LONG_QUEUE, PROJECTIONS_QUEUE}
        return found if found.get(TOOLS_QUEUE) == 3 and set(found) == consumed else None

    found = wait_for("Flower's queue lengths", lengths)
    # Then it names the three queues with the broker's own counts
    assert found == {TOOLS_QUEUE: 3, LONG_QUEUE: 2, PROJECTIONS_QUEUE: 0}
    # And its Broker page answers (it used to be 404: "'redis' broker is not supported")
    with urllib.request.urlopen(monitored.api.removesuffix("/api") + "/broker", timeout=5) as page:
        assert page.status == 200
        assert "redis://" in page.read().decode()
    # And every call still ends READY once the slot frees
    for call_id in ("flower-busy", "flower-tools-0", "flower-long-1"):
        outcome = monitored.boundary.outcome(RUN.run_id, call_id, timeout=WAIT_S)
        assert outcome.status is InvocationStatus.READY, call_id


class HeldDispatcher:
    """Records calls and never sends them (a test sends their messages itself)."""

    def dispatch(self, key: CanonicalKey) -> None:
        return None

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


def task_info(monitored: Monitored, task_id: str) -> dict[str, Any]:
    return get_json(f"{monitored.api}/task/info/{task_id}")  # type: ignore[no-any-return]


def failed_with(monitored: Monitored, task_id: str, code: str) -> dict[str, Any]:
    """Waits until Flower lists ``task_id`` among the failed tasks; returns its info."""

    def listed() -> dict[str, Any] | None:
        failed = get_json(f"{monitored.api}/tasks?state=FAILURE")
        return task_info(monitored, task_id) if task_id in failed else None

    info = wait_for(f"{task_id} listed as failed", listed)
    assert info["state"] == "FAILURE"
    assert info["exception"] == f"ToolCallFailed('{code}')"
    assert not info.get("traceback")
    return info


def test_a_call_cancelled_while_its_tool_runs_is_a_failed_task(
    monitored: Monitored, tmp_path: Path
) -> None:
    # Given a call whose tool runs
    call(monitored, "flower-cancel", "sleepy", {"seconds": 2, "started": str(tmp_path / "on")})
    wait_for("the tool to start", (tmp_path / "on").exists)
    # When it is cancelled
    outcome = monitored.boundary.cancel(RUN.run_id, "flower-cancel")
    assert outcome.error_code is not None and outcome.error_code.value == "CANCELLED"
    # Then Flower's failed tasks list its execute task, with the code only
    failed_with(monitored, f"{RUN.run_id}:flower-cancel:execute", "CANCELLED")


def test_an_attempt_another_attempt_took_over_is_a_failed_task(monitored: Monitored) -> None:
    # Given a call whose first attempt was judged lost after it started: attempt 2 has it
    runtime = get_runtime()
    held = ToolBoundary(store=runtime.store, registry=runtime.registry, dispatcher=HeldDispatcher())
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id="flower-lost", tool_name="lookup", arguments={"query": "q"}
    )
    assert held.submit(envelope, RUN).accepted
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="flower-lost")
    assert runtime.store.claim(key, attempt=1, heartbeat_timeouts={}).record is not None
    assert runtime.store.retry_attempt(key, attempt=1, reap_after_s=300, reap_grace_s=1) == 2
    # When attempt 1's message comes back to a worker (a lost worker's unacknowledged one)
    CeleryDispatcher(create_app(monitored.settings, name="tests_flower_lost")).send_attempt(
        key, attempt=1, queue=TOOLS_QUEUE
    )
    # Then its execute task is listed as failed (it was SUCCESS 'HANDED_ON')
    try:
        failed_with(monitored, f"{RUN.run_id}:flower-lost:execute", "SUPERSEDED")
    finally:
        held.cancel(RUN.run_id, "flower-lost")


def test_the_reapers_runs_stay_out_of_the_task_list(monitored: Monitored) -> None:
    # Given a reaper run sent as beat sends it, that a worker ran
    app = create_app(monitored.settings, name="tests_flower_reap")
    sent = app.send_task(REAP)
    assert isinstance(sent.get(timeout=WAIT_S), dict)
    # And a call Flower saw after it
    call(monitored, "flower-after-reap", "lookup", {"query": "q"})
    task_id = f"{RUN.run_id}:flower-after-reap:execute"
    wait_for("the call's task in Flower", lambda: task_info(monitored, task_id).get("name"))
    # Then Flower knows no reaper task: no event of it was sent
    assert get_json(f"{monitored.api}/tasks?taskname={REAP}") == {}
    assert sent.id not in get_json(f"{monitored.api}/tasks")


def test_a_call_handed_a_slot_by_another_shows_no_parent(monitored: Monitored) -> None:
    # Given a tool limited to one call at once, and two calls of it: the second waits
    call(monitored, "flower-slot-1", "narrow", {"ms": 800, "tag": "flower-parent"})
    call(monitored, "flower-slot-2", "narrow", {"ms": 10, "tag": "flower-parent"})
    for call_id in ("flower-slot-1", "flower-slot-2"):
        outcome = monitored.boundary.outcome(RUN.run_id, call_id, timeout=WAIT_S)
        assert outcome.status is InvocationStatus.READY, call_id
    # When Flower shows the second call's execute task (sent by the first's worker task as
    # it freed the slot)
    task_id = f"{RUN.run_id}:flower-slot-2:execute"
    info = wait_for("the second call's task", lambda: task_info(monitored, task_id).get("received"))
    info = task_info(monitored, task_id)
    # Then it names no parent: it is no task's child
    assert info["parent_id"] is None, info["parent_id"]
    assert info["root_id"] == task_id
