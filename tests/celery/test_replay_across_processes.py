"""Crash and resume through a real worker: the same tool_call_id from two processes at once
runs the tool exactly once and answers the other with the code for what it was (the same
call, or another one); ``replay=True`` hands back the first call's outcome, waiting while it
runs, and charges no budget."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from boundary import (
    ErrorCode,
    InvocationStatus,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.store import keys
from tasks.settings import Settings
from tests.celery.workers import ROOT, settings_env
from tests.support.celery_tools import runs_of
from tests.support.helpers import wait_until

#: Longest a racing process may take from start to its printed outcome, seconds.
PROCESS_TIMEOUT_S = 90


def a_run(*tools: str) -> RunContext:
    """A run of its own, so no earlier test's task result can be read as this one's."""
    return RunContext(run_id=f"replay-{uuid.uuid4().hex[:12]}", authorized_tools=frozenset(tools))


def call(run: RunContext, arguments: dict[str, Any], tool: str = "counted") -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=run.run_id, tool_call_id="call_1", tool_name=tool, arguments=arguments
    )


def race(
    settings: Settings, run: RunContext, arguments: list[dict[str, Any]], replay: bool, tmp: Path
) -> list[ToolOutcome]:
    """Starts one process per arguments, each making call_1 of ``run``, and lets them all go
    at once (when every one is connected); their outcomes, in order."""
    go = tmp / "go"
    procs = []
    for i, args in enumerate(arguments):
        argv = [run.run_id, "call_1", json.dumps(args), str(tmp / f"ready-{i}"), str(go)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.celery.same_id", *argv, "1" if replay else "0"],
                cwd=ROOT,
                env=settings_env(settings),
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    try:

        def ready() -> bool:
            assert all(p.poll() is None for p in procs), "a racing process ended early"
            return all((tmp / f"ready-{i}").exists() for i in range(len(procs)))

        wait_until(ready, "the racing processes to start", PROCESS_TIMEOUT_S, every=0.01)
        go.touch()
        outputs = [p.communicate(timeout=PROCESS_TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [
        ToolOutcome.model_validate(json.loads(out.splitlines()[-1])["outcome"]) for out in outputs
    ]


def charged(redis_client: redis.Redis, run: RunContext) -> dict[str, str]:
    """The run's budget counters (the call count, and per tool)."""
    counters = redis_client.hgetall(keys.budget_key(run.run_id))
    return {k: v for k, v in counters.items() if k == "calls" or k.startswith("tool:")}


def codes(outcomes: list[ToolOutcome]) -> list[str]:
    return sorted(o.error_code.value if o.error_code else o.status.value for o in outcomes)


@pytest.mark.parametrize(
    ("same_arguments", "replay", "expected"),
    [
        (True, False, ["DUPLICATE_TOOL_CALL", "READY"]),
        (False, False, ["DUPLICATE_TOOL_CALL_CONFLICT", "READY"]),
        (True, True, ["READY", "READY"]),
        (False, True, ["DUPLICATE_TOOL_CALL_CONFLICT", "READY"]),
    ],
)
def test_the_same_id_from_two_processes_runs_the_tool_once(
    celery_boundary: ToolBoundary,
    celery_settings: Settings,
    redis_client: redis.Redis,
    tmp_path: Path,
    same_arguments: bool,
    replay: bool,
    expected: list[str],
) -> None:
    # Given two processes holding the same tool_call_id, with the same or other arguments
    run = a_run("counted")
    log = str(tmp_path / "runs.log")
    arguments = [{"log": log, "n": 1}, {"log": log, "n": 1 if same_arguments else 2}]
    # When both submit it at once
    outcomes = race(celery_settings, run, arguments, replay, tmp_path)
    # Then the tool ran exactly once, was charged once, and each got the code it should
    assert codes(outcomes) == expected
    assert runs_of(log) == 1
    assert redis_client.hget(keys.budget_key(run.run_id), "calls") == "1"
    ready = [o for o in outcomes if o.status is InvocationStatus.READY]
    # and every READY answer is the one outcome of the one record
    first = celery_boundary.outcome(run.run_id, "call_1", timeout=5)
    assert ready and all(o == first for o in ready)


def test_replay_while_the_first_call_runs_waits_for_its_outcome(
    celery_boundary: ToolBoundary,
    held_calls: threading.Event,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    # Given a call whose tool is running (held until the test lets it go)
    run = a_run("counted")
    log = str(tmp_path / "runs.log")
    first = call(run, {"log": log, "hold": True})
    assert celery_boundary.submit(first, run).accepted
    wait_until(lambda: runs_of(log) != 0, "the tool to start", 30, every=0.01)
    budget = charged(redis_client, run)
    # When it is replayed with a short wait, it is still running: a PROJECTING outcome
    pending = celery_boundary.invoke(first, run, timeout=0.2, replay=True)
    assert pending.pending and pending.tool_call_id == "call_1"
    assert pending.result is None and pending.error_code is None
    # and replays (sync and async) that wait get the first call's outcome once it is sealed
    answers: list[ToolOutcome] = []

    def sync_replay() -> None:
        answers.append(celery_boundary.invoke(first, run, timeout=30, replay=True))

    async def async_replay() -> ToolOutcome:
        try:
            return await celery_boundary.ainvoke(first, run, timeout=30, replay=True)
        finally:
            await celery_boundary.aclose()

    waiters = [
        threading.Thread(target=sync_replay),
        threading.Thread(target=lambda: answers.append(asyncio.run(async_replay()))),
    ]
    for waiter in waiters:
        waiter.start()
    held_calls.set()
    for waiter in waiters:
        waiter.join(timeout=60)
    # Then both are the READY outcome of the one run of the tool, and nothing was charged
    outcome = celery_boundary.outcome(run.run_id, "call_1", timeout=5)
    assert outcome.status is InvocationStatus.READY
    assert answers == [outcome, outcome]
    assert runs_of(log) == 1
    assert charged(redis_client, run) == budget == {"calls": "1", "tool:counted": "1"}


@pytest.mark.parametrize(
    ("tool", "status", "code"),
    [
        ("counted", InvocationStatus.READY, None),
        ("boom", InvocationStatus.ERROR, ErrorCode.TOOL_EXECUTION_FAILED),
    ],
)
def test_replay_after_the_seal_returns_the_first_outcome_and_charges_nothing(
    celery_boundary: ToolBoundary,
    redis_client: redis.Redis,
    tmp_path: Path,
    tool: str,
    status: InvocationStatus,
    code: ErrorCode | None,
) -> None:
    # Given a sealed call in a run whose budget it used up
    run = a_run(tool).model_copy(update={"max_tool_calls": 1})
    log = str(tmp_path / "runs.log")
    envelope = call(run, {"log": log}, tool)
    first = celery_boundary.invoke(envelope, run, timeout=30)
    assert (first.status, first.error_code) == (status, code)
    budget = redis_client.hgetall(keys.budget_key(run.run_id))
    # When it is replayed, and submitted again for replay
    replayed = celery_boundary.invoke(envelope, run, timeout=30, replay=True)
    submitted = celery_boundary.submit(envelope, run, replay=True)
    # Then the answer is the first outcome, the budget untouched, the tool not run again
    assert replayed == first
    assert submitted.accepted and submitted.replayed and submitted.outcome is None
    assert redis_client.hgetall(keys.budget_key(run.run_id)) == budget
    assert runs_of(log) == (1 if tool == "counted" else 0)
