"""ROLLING UPGRADE (issue 50): the previous release and this code side by side on one Redis.

The previous release is the tree at commit ``PREVIOUS_COMMIT`` (0.5.0), built with
``git archive`` (a clean clone always has the commit; no tag needed) and run with this
interpreter and ``PYTHONPATH`` at that tree. Two workers of each version, callers of each
version (``rolling_caller.py``) making 400 calls (quick ones, long ones with heartbeats, a
limited tool's, turns) while the old workers are replaced one by one (a new worker started,
then SIGTERM to an old one), then a new worker is restarted while it runs long calls (it
drains and hands them back). Every call ends sealed once, none stuck or lost, no slot held,
every outcome the same as on a one-version fleet, and each handed-back call ran again, as its
next attempt, on another new worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from bench.rig.workers import (
    ROOT,
    await_log,
    celery_command,
    start_process,
    stop_group,
    worker_args,
)
from boundary import CanonicalKey, InvocationStatus, RunContext, ToolBoundary, ToolCallEnvelope
from boundary.flow import Flow
from boundary.store import keys
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tests.celery.test_worker_loss import isolated
from tests.celery.workers import settings_env
from tests.support.helpers import wait_until
from tests.support.servers import CI

__all__ = ["isolated"]  # the fixture, used by name

#: The previous release (0.5.0): the last landing before format versions.
PREVIOUS_COMMIT = "caee005"
CALLER = Path(__file__).with_name("rolling_caller.py")
#: Calls per caller, and the seconds each spreads them over (the roll happens meanwhile).
CALLS, SPREAD_S = 200, 12.0
#: Longest any one process may take to start or stop here (only a hung one reaches it).
PATIENCE_S = 90
HOST = socket.gethostname()


@pytest.fixture(scope="module")
def previous_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's tree, from its commit."""
    where = tmp_path_factory.mktemp("previous")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS_COMMIT],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        message = f"commit {PREVIOUS_COMMIT} not in this clone's history"
        if CI:
            pytest.fail(message)
        pytest.skip(message)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


class Fleet:
    """Worker and caller processes of both versions, stopped whole at the end."""

    def __init__(self, settings: Settings, previous: Path, logs: Path) -> None:
        self.env = settings_env(settings) | {"TOOL_BOUNDARY_WORKER_DRAIN_S": "1"}
        # The previous release's tree keeps the test tools at their old place (tests/, not
        # tests/support/).
        old_tools = self.env["TOOL_BOUNDARY_TOOLS"].replace("tests.support.", "tests.")
        self.old_env = self.env | {"PYTHONPATH": str(previous), "TOOL_BOUNDARY_TOOLS": old_tools}
        self.previous = previous
        self.logs = logs
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, *names: str) -> None:
        """Starts the named workers (``old-*``: the previous release) and waits until ready."""
        for name in names:
            old = name.startswith("old")
            args = worker_args("threads", 4, ("tools", "projections"), node=f"{name}@%h")
            self.workers[name] = start_process(
                celery_command("tasks", *args),
                self.old_env if old else self.env,
                self.logs / f"{name}.log",
                cwd=self.previous if old else ROOT,
            )
        for name in names:
            await_log(self.workers[name], self.logs / f"{name}.log", " ready.", PATIENCE_S, name)

    def stop(self, name: str) -> int:
        """SIGTERM to a worker (a rolling deploy's), then its exit code once it exited."""
        proc = self.workers[name]
        os.kill(proc.pid, signal.SIGTERM)
        return proc.wait(timeout=PATIENCE_S)

    def caller(self, run_id: str, old: bool, spread_s: float) -> subprocess.Popen[bytes]:
        out = self.logs / f"{run_id}.json"
        log = (self.logs / f"{run_id}.log").open("wb")
        return subprocess.Popen(
            [sys.executable, str(CALLER), str(out), run_id, str(CALLS), str(spread_s)],
            cwd=self.previous if old else ROOT,
            env=self.old_env if old else self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def outcomes(self, run_id: str, caller: subprocess.Popen[bytes]) -> dict[str, Any]:
        code = caller.wait(timeout=PATIENCE_S + SPREAD_S)
        log = (self.logs / f"{run_id}.log").read_text(errors="replace")
        assert code == 0, log[-3000:]
        found: dict[str, Any] = json.loads((self.logs / f"{run_id}.json").read_text())
        return found

    def close(self) -> None:
        for proc in self.workers.values():
            stop_group(proc)


@pytest.fixture
def fleet(
    isolated: tuple[Settings, Celery, ToolBoundary], previous_tree: Path, tmp_path: Path
) -> Iterator[Fleet]:
    fleet = Fleet(isolated[0], previous_tree, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()


def same(outcome: dict[str, Any]) -> dict[str, Any]:
    """What must not depend on the fleet: status, evidence, code and result (the long tool
    names the attempt that ran it: ``beat-N``, the same for any N)."""
    text = json.dumps(outcome.get("result"), sort_keys=True)
    return {
        "status": outcome["status"],
        "evidence_status": outcome.get("evidence_status"),
        "error_code": outcome.get("error_code"),
        "result": re.sub(r"beat-\d+", "beat-N", text),
    }


def control(app: Celery, command: str, nodes: list[str]) -> None:
    """``cancel_consumer`` or ``add_consumer`` of the tools queue on ``nodes``, until each
    replied (a broadcast's reply may come late on a loaded machine)."""
    waiting = set(nodes)
    for _ in range(10):
        replies = getattr(app.control, command)(
            "tools", destination=sorted(waiting), reply=True, timeout=3
        )
        waiting -= {node for reply in replies or [] for node in reply}
        if not waiting:
            return
    pytest.fail(f"{command}: no reply from {sorted(waiting)}")


def sealed_once(redis_client: redis.Redis, run_id: str, count: int) -> None:
    members = redis_client.zrange(keys.progress_key(run_id), 0, -1)
    ids = [m.rsplit(":", 1)[0] for m in members]
    assert len(ids) == len(set(ids)) == count, (len(ids), len(set(ids)))
    assert redis_client.zcard(keys.pending_key(run_id)) == 0


@pytest.mark.slow
def test_rolling_upgrade_from_the_previous_release_loses_no_call(
    fleet: Fleet,
    isolated: tuple[Settings, Celery, ToolBoundary],
    redis_client: redis.Redis,
) -> None:
    _, app, boundary = isolated
    # Given a one-version fleet of this code, and its outcomes of the calls (the reference)
    fleet.start("new-1", "new-2")
    reference = fleet.outcomes("ref", fleet.caller("ref", old=False, spread_s=0))

    # And two workers of the previous release joining it
    fleet.start("old-1", "old-2")

    # When callers of both versions make their calls while the old workers are replaced one
    # by one (the new worker first, then SIGTERM to the old one)
    old_caller = fleet.caller("old", old=True, spread_s=SPREAD_S)
    new_caller = fleet.caller("new", old=False, spread_s=SPREAD_S)
    wait_until(
        lambda: (
            redis_client.zcard(keys.progress_key("old")) >= 40
            and redis_client.zcard(keys.progress_key("new")) >= 40
        ),
        "the callers' first calls ended",
        patience=PATIENCE_S,
    )
    fleet.start("new-3")
    assert fleet.stop("old-1") == 0
    fleet.start("new-4")
    assert fleet.stop("old-2") == 0
    outcomes = {"old": fleet.outcomes("old", old_caller), "new": fleet.outcomes("new", new_caller)}

    # Then every call ended once, with the outcome the one-version fleet gave it
    for run_id, found in outcomes.items():
        assert set(found) == set(reference), run_id
        for call_id, outcome in found.items():
            assert outcome["status"] != InvocationStatus.PROJECTING.value, (run_id, call_id)
            assert same(outcome) == same(reference[call_id]), (run_id, call_id, outcome)
        sealed_once(redis_client, run_id, CALLS)
    # (each version really took part: the old callers' records carry no format, 0.5.0 wrote
    # none; the old workers ran calls)
    assert (
        redis_client.hget(keys.record_key(CanonicalKey(run_id="old", tool_call_id="c7")), "format")
        is None
    )
    assert (
        redis_client.hget(keys.record_key(CanonicalKey(run_id="new", tool_call_id="c7")), "format")
        == "2"
    )
    for name in ("old-1", "old-2"):
        assert "tool_boundary.execute[" in (fleet.logs / f"{name}.log").read_text()
    # And no slot of the limited tool is held, none waits
    flow = boundary.store.flow
    assert isinstance(flow, Flow)
    wait_until(
        lambda: (flow.status("slot3").running, flow.status("slot3").waiting) == (0, 0),
        "no slot held",
    )

    # When a new worker is restarted while it runs long calls (the others take none meanwhile)
    others = [f"new-{i}@{HOST}" for i in (2, 3, 4)]
    control(app, "cancel_consumer", others)
    run = RunContext(run_id="drain", authorized_tools=frozenset({"beating"}))
    long_calls = [f"long-{i}" for i in range(4)]
    for call_id in long_calls:
        arguments = {"steps": 60, "step_s": 0.1, "retry_steps": 5}
        envelope = ToolCallEnvelope(
            run_id="drain", tool_call_id=call_id, tool_name="beating", arguments=arguments
        )
        assert boundary.submit(envelope, run).accepted
    store = get_runtime().store

    def started(call_id: str) -> bool:
        record = store.get(CanonicalKey(run_id="drain", tool_call_id=call_id), with_raw=False)
        return record is not None and record.started_at is not None

    for call_id in long_calls:
        wait_until(lambda call_id=call_id: started(call_id), f"{call_id} started")
    control(app, "add_consumer", others)
    drained_pid = fleet.workers["new-1"].pid
    assert fleet.stop("new-1") == 0

    # Then each long call was handed back and ran again, as its next attempt, on another worker
    for call_id in long_calls:
        outcome = boundary.outcome("drain", call_id, timeout=60)
        assert outcome.status is InvocationStatus.READY, outcome
        record = store.get(CanonicalKey(run_id="drain", tool_call_id=call_id))
        assert record is not None and record.raw is not None
        assert (record.attempt, record.handbacks) == (2, 1), record
        ran_on = json.loads(record.raw)["hits"][0]["pid"]
        assert ran_on != drained_pid
        assert ran_on in {fleet.workers[f"new-{i}"].pid for i in (2, 3, 4)}
    sealed_once(redis_client, "drain", len(long_calls))

    # And no worker of either version logged a traceback
    for name in fleet.workers:
        text = (fleet.logs / f"{name}.log").read_text(errors="replace")
        assert "Traceback" not in text, (name, text[-3000:])
