"""Nothing raw reaches a Celery result, Flower or the logs; many calls of one run in flight."""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks.settings import Settings
from tests.celery.conftest import RUN, all_redis_text
from tests.celery.workers import celery_process
from tests.conftest import BACKEND_DB, BROKER_DB, REDIS_HOST, REDIS_PORT
from tests.support import celery_tools
from tests.support.celery_tools import SECRET, SECRET_URL, STACK
from tests.support.helpers import wait_until

#: Fragments of what was planted; none may show up anywhere outside the canonical record.
PLANTED = (SECRET, "hunter2-pass", "10.9.8.7", "Traceback", STACK.splitlines()[1].strip())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def assert_clean(text: str, where: str) -> None:
    for fragment in PLANTED:
        at = text.find(fragment)
        assert at < 0, f"{fragment!r} leaked into {where}: ...{text[max(0, at - 300) : at + 80]}"


def wait_until_flower_sees_events(boundary: ToolBoundary, api: str) -> None:
    """Flower says it is up before its event receiver is connected: make calls until one
    shows up in its task list with a name."""
    for n in range(60):
        call_id = f"warm-up-{n}"
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id=call_id, tool_name="lookup", arguments={"query": "w"}
        )
        boundary.invoke(envelope, RUN, timeout=30)
        time.sleep(0.5)
        seen = get_json(f"{api}/tasks")
        if seen.get(f"{RUN.run_id}:{call_id}:execute", {}).get("name"):
            return
    raise AssertionError("Flower never received the worker's events")


def test_no_secret_in_results_backend_flower_or_logs(
    celery_boundary: ToolBoundary,
    celery_settings: Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    with celery_process(
        celery_settings,
        "flower",
        f"--port={port}",
        "--address=127.0.0.1",
        ready_text="Visit me at",
        log=tmp_path / "flower.log",
        extra_env={"FLOWER_UNAUTHENTICATED_API": "true"},
    ):
        api = f"http://127.0.0.1:{port}/api"
        wait_until_flower_sees_events(celery_boundary, api)
        # Given calls whose request, raw response and exceptions hold secrets
        caplog.set_level(logging.DEBUG)
        calls = {
            # (the projector echoes "query" as the scope, by its own choice; the boundary
            # itself copies no request field into any agent-facing or task value)
            "leak-request": ("lookup", {"query": "find", "api_key": SECRET, "dsn": SECRET_URL}),
            "leak-raw": ("leaky", {"note": SECRET}),
            "leak-tool-exc": ("boom", {"q": SECRET}),
            "leak-projector-exc": ("bad_projector", {"query": "x", "token": SECRET}),
        }
        outcomes = {}
        for call_id, (tool, arguments) in calls.items():
            envelope = ToolCallEnvelope(
                run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
            )
            outcomes[call_id] = celery_boundary.invoke(envelope, RUN, timeout=30)
        # (the raw response and the request keep the secret: Harness-only canonical data)
        assert outcomes["leak-raw"].status is InvocationStatus.READY
        assert outcomes["leak-tool-exc"].error_code is ErrorCode.TOOL_EXECUTION_FAILED
        assert outcomes["leak-projector-exc"].error_code is ErrorCode.PROJECTION_FAILED
        # When Flower has seen every task end: each call's execute task, and its project
        # task where one goes (every call's when the worker sends the chained project task,
        # the default; only the ERROR calls' when it projects in line, the opt-in)
        failing = ("leak-tool-exc", "leak-projector-exc")
        projected = failing if celery_settings.project_in_line else tuple(calls)
        wanted = {("tool_boundary.execute", f"{RUN.run_id}:{c}:execute") for c in calls} | {
            ("tool_boundary.project", f"{RUN.run_id}:{c}:project") for c in projected
        }

        def all_ended() -> dict[str, Any] | None:
            tasks = get_json(f"{api}/tasks")
            ended = {
                (t["name"], t["uuid"])
                for t in tasks.values()
                if t.get("state") in ("SUCCESS", "FAILURE")
            }
            return tasks if wanted <= ended else None

        tasks = wait_until(all_ended, "Flower to list every task ended", 30, every=0.5)
        # Then Flower lists every task by name and id, and shows no secret
        names = {(t["name"], t["uuid"]) for t in tasks.values()}
        assert wanted <= names
        flower_text = json.dumps(tasks)
        for task_id in tasks:
            flower_text += json.dumps(get_json(f"{api}/task/info/{task_id}"))
        assert_clean(flower_text, "Flower's task API")
        assert f"'{RUN.run_id}', 'leak-raw'" in flower_text  # argsrepr: the ids only
        # And the ERROR calls are failed tasks there, carrying their code and no traceback
        for call_id, code in (
            ("leak-tool-exc", "TOOL_EXECUTION_FAILED"),
            ("leak-projector-exc", "PROJECTION_FAILED"),
        ):
            info = get_json(f"{api}/task/info/{RUN.run_id}:{call_id}:project")
            assert info["state"] == "FAILURE", info
            assert info["exception"] == f"ToolCallFailed('{code}')"
            assert not info.get("traceback"), info
        failed = get_json(f"{api}/tasks?state=FAILURE")
        assert {t["uuid"] for t in failed.values()} == {
            f"{RUN.run_id}:{call_id}:project" for call_id in ("leak-tool-exc", "leak-projector-exc")
        }
    # And the result backend and the broker hold none of it
    for db, where in ((BACKEND_DB, "the result backend"), (BROKER_DB, "the broker")):
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db, decode_responses=True)
        assert_clean(all_redis_text(client), where)
    # And neither do the agent-facing outcomes or the logs
    assert_clean("".join(o.model_dump_json() for o in outcomes.values()), "the outcomes")
    assert_clean("\n".join(r.getMessage() for r in caplog.records), "the logs")


def test_twenty_slow_calls_of_one_run_in_flight_at_once(celery_boundary: ToolBoundary) -> None:
    # Given 20 calls of one run, each waiting until CROWD_SIZE of them run at once (a call
    # that ran without that many beside it would end "alone"), submitted before any is awaited
    celery_tools.reset_crowd()
    for n in range(20):
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id=f"slow-{n}", tool_name="crowd", arguments={"n": n}
        )
        assert celery_boundary.submit(envelope, RUN).accepted
    # When every outcome is awaited
    outcomes = [celery_boundary.outcome(RUN.run_id, f"slow-{n}", timeout=60) for n in range(20)]
    # Then each ended READY with its own result, and they ran side by side (8 threads)
    for n, outcome in enumerate(outcomes):
        assert outcome.status is InvocationStatus.READY, outcome
        assert outcome.evidence_status is EvidenceStatus.EVIDENCE_FOUND
        assert outcome.tool_call_id == f"slow-{n}"
        assert outcome.result == {"count": 1, "first": f"crowd-{n}"}
    facts = celery_boundary.observe(RUN)
    assert len(facts.facts) == 20
