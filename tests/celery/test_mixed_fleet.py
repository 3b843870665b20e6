"""A fleet that mixes workers projecting in line (``TOOL_BOUNDARY_PROJECT_IN_LINE=true``, the
opt-in) and workers sending the chained project task (the default) on one broker: every call
is sealed once, whichever kind of worker ran it, and both kinds take part.

Four real ``celery worker`` subprocesses (two of each setting) consume ``tools`` and
``projections`` of one broker DB; what each did is read from its own INFO log (the task
lines Celery writes), the seals from the store's run counters.
"""

from __future__ import annotations

import re
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import RunContext, ToolCallEnvelope
from boundary.store import keys
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url

pytestmark = pytest.mark.slow

#: Calls of the test; longest wait for all of them, seconds (a bound, not a timing check).
CALLS = 32
WAIT_S = 60.0

_EXECUTED = re.compile(r"Task tool_boundary\.execute\[[^\]]+\] succeeded in [^:]+: (.*)$")
_PROJECTED = re.compile(r"Task tool_boundary\.project\[[^\]]+\] succeeded in ")


def _task_lines(log: Path) -> tuple[list[str], int]:
    """The results its execute tasks logged, and how many project tasks succeeded."""
    executed: list[str] = []
    projected = 0
    for line in log.read_text(errors="replace").splitlines():
        if match := _EXECUTED.search(line):
            executed.append(match.group(1))
        elif _PROJECTED.search(line):
            projected += 1
    return executed, projected


def test_a_fleet_mixing_in_line_and_chained_workers_seals_every_call_once(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    # Given two workers that project in line and two that send the chained project task,
    # on one broker
    broker = flush_db(SUBPROCESS_BROKER_DB)
    run = RunContext(run_id=f"run-fleet-{uuid.uuid4().hex[:8]}", authorized_tools={"sleepy"})
    logs = {(in_line, n): tmp_path / f"{'inline' if in_line else 'chain'}-{n}.log"
            for in_line in (True, False) for n in (1, 2)}  # fmt: skip
    with ExitStack() as workers:
        for (in_line, n), log in logs.items():
            settings = celery_test_settings(
                broker_url=redis_url(SUBPROCESS_BROKER_DB), project_in_line=in_line
            )
            name = f"{'inline' if in_line else 'chain'}{n}"
            workers.enter_context(
                celery_process(settings, *worker_args(name, concurrency=2), log=log)
            )
        app = create_app(
            celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB)), name="tests_fleet"
        )
        boundary = get_runtime().boundary(CeleryDispatcher(app))

        # When calls that each take a moment are submitted, then waited for
        envelopes = [
            ToolCallEnvelope(
                run_id=run.run_id,
                tool_call_id=f"fleet-{i}",
                tool_name="sleepy",
                arguments={"seconds": 0.1, "n": i},
            )
            for i in range(CALLS)
        ]
        for envelope in envelopes:
            assert boundary.submit(envelope, run).accepted
        outcomes = [
            boundary.outcome(run.run_id, envelope.tool_call_id, timeout=WAIT_S)
            for envelope in envelopes
        ]
    broker.flushdb()

    # Then every call ended READY with its own result
    assert [o.status for o in outcomes] == ["READY"] * CALLS, outcomes
    wanted = [{"count": 1, "first": f"slept-{i}"} for i in range(CALLS)]
    assert [o.result for o in outcomes] == wanted
    # And each was sealed once: the run's seal counter and its progress set count each once
    budget = redis_client.hgetall(keys.budget_key(run.run_id))
    assert budget["sealed:READY"] == str(CALLS)
    assert "sealed:ERROR" not in budget
    assert redis_client.zcard(keys.progress_key(run.run_id)) == CALLS
    # And each call ran its tool once, and was projected once: in line on the worker that ran
    # it (its execute task returned the outcome), or by one chained project task
    in_line_runs = chained_runs = projects = 0
    for (in_line, _), log in logs.items():
        executed, projected = _task_lines(log)
        projects += projected
        if in_line:
            assert all(result.startswith("{") for result in executed), executed
            in_line_runs += len(executed)
        else:
            assert set(executed) <= {"'STORED'"}, executed
            chained_runs += len(executed)
    assert in_line_runs + chained_runs == CALLS
    assert projects == chained_runs
    # And both kinds of worker ran calls
    assert in_line_runs > 0 and chained_runs > 0, (in_line_runs, chained_runs)
