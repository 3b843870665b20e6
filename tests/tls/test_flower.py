"""Flower over TLS as the operator's user: its task list shows the worker's calls, its Broker
API the queues' lengths, and no page shows the password."""

from __future__ import annotations

import itertools
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from boundary import RunContext, ToolCallEnvelope
from tests.celery.workers import celery_process
from tests.support.helpers import wait_until
from tests.support.servers import free_port, release_port
from tests.tls.servers import TlsRedisServer
from tests.tls.stack import caller, role_settings, worker

RUN = RunContext(run_id="run-flower-tls", authorized_tools=frozenset({"lookup"}))
#: Longest any wait here may take (a bound, reached only when the test fails).
WAIT_S = 60.0


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


@pytest.fixture(scope="module")
def flower(tls_redis: TlsRedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("flower-tls")
    port = free_port()
    settings = role_settings(tls_redis, "operator", 0)
    try:
        with (
            worker(tls_redis, logs / "worker.log", 0),
            celery_process(
                settings,
                "flower",
                f"--port={port}",
                "--address=127.0.0.1",
                ready_text="Visit me at",
                log=logs / "flower.log",
                extra_env={"FLOWER_UNAUTHENTICATED_API": "true"},
            ),
        ):
            yield f"http://127.0.0.1:{port}"
    finally:
        release_port(port)
    text = (logs / "flower.log").read_text()
    assert all(p not in text for p in tls_redis.users.passwords.values())


def test_flowers_task_list_and_queues_over_tls(tls_redis: TlsRedisServer, flower: str) -> None:
    boundary = caller(tls_redis, 0)
    sent = itertools.count()

    def flower_saw_a_call() -> bool:
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id,
            tool_call_id=f"f{next(sent)}",
            tool_name="lookup",
            arguments={"query": "f"},
        )
        boundary.invoke(envelope, RUN, timeout=30)
        time.sleep(0.5)
        seen: dict[str, Any] = json.loads(get(f"{flower}/api/tasks"))
        return any(v.get("name") for k, v in seen.items() if k.startswith(RUN.run_id))

    # (Flower says it is up before its event receiver listens: calls until it sees one)
    wait_until(flower_saw_a_call, "Flower to list a call (a refusal: Redis's ACL LOG)", WAIT_S)
    queues = json.loads(get(f"{flower}/api/queues/length"))
    assert {q["name"] for q in queues["active_queues"]} >= {"tools", "projections"}, queues
    for page in ("/broker", "/api/workers?refresh=1", "/tasks"):
        body = get(flower + page)
        assert all(p not in body for p in tls_redis.users.passwords.values()), page
    # And Redis refused the operator's user nothing (Flower's inspect replies included)
    refused = [e for e in tls_redis.client().acl_log(200) if e.get("username") == "tb-operator"]
    assert refused == [], refused
