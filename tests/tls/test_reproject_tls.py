"""A re-projection job over mutual TLS, each process as its role's user of the shipped ACL
file: ``tool-boundary reproject`` as the operator's user, the chunks run by a worker on the
``reprojections`` queue as the worker's user with version 2 of a projector, on records that
version 1 sealed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.rig import workers as rig
from boundary import (
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks.wiring.app import REPROJECTIONS_QUEUE
from tests.celery.workers import celery_process
from tests.support import reprojection_tools
from tests.support.reprojection_tools import SECRET, TOOL, make_registry
from tests.tls.servers import TlsRedisServer
from tests.tls.stack import role_settings

#: Broker DB 0: the file's pattern subscriptions name it (``&/0.celery.pidbox``).
BROKER_DB = 0
RUN = RunContext(run_id="run-tls-reproject", authorized_tools=frozenset({TOOL}))
#: call id, query, score: version 2 adds a count to c1 and finds no evidence for c2.
CALLS = (("c1", "a", 0.9), ("c2", "b", 0.2))
TOOLS = "tests.support.reprojection_tools:registry"
USERS = ("tb-operator", "tb-worker")


def test_a_reproject_job_runs_over_tls_as_the_operator_with_a_worker_as_the_worker(
    tls_redis: TlsRedisServer, tmp_path: Path
) -> None:
    # Given records sealed by version 1 of the projector (as the worker's user)
    tools = make_registry("1")
    store = RedisCanonicalStore.from_url(tls_redis.url_for("worker", 0), ttl_s=600)
    v1 = ToolBoundary(
        store=store, registry=tools, dispatcher=InProcessDispatcher(store, tools, inline=True)
    )
    for call_id, query, score in CALLS:
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id,
            tool_call_id=call_id,
            tool_name=TOOL,
            arguments={"query": query, "score": score},
        )
        assert v1.invoke(envelope, RUN, timeout=10).status is InvocationStatus.READY
    # and a worker with version 2 on the reprojections queue, as the worker's user
    worker_settings = role_settings(tls_redis, "worker", BROKER_DB, tools=TOOLS)
    args = rig.worker_args("threads", 2, (REPROJECTIONS_QUEUE,), node="tls-rp@%h")
    log = tmp_path / "worker.log"
    with celery_process(
        worker_settings,
        *args,
        log=log,
        timeout_s=60,
        extra_env={reprojection_tools.VERSION_ENV: "2"},
    ):
        # When the operator's user runs the job (the CLI, its own process)
        operator = role_settings(tls_redis, "operator", BROKER_DB, tools=TOOLS)
        out = tmp_path / "diff.jsonl"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tasks.cli",
                "reproject",
                "--projectors",
                "current",
                "--run",
                RUN.run_id,
                "--out",
                str(out),
                "--json",
            ],
            env=rig.settings_env(operator),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    # Then it ends (exit 0) with version 2's diff of the run
    said = done.stdout + done.stderr
    assert done.returncode == 0, (said[-3000:], log.read_text()[-3000:])
    (line,) = [json.loads(text) for text in out.read_text().splitlines()]
    assert line["run_id"] == RUN.run_id and line["changed"] is True
    assert (line["records"], line["records_changed"]) == (2, 2)
    assert line["diff"]["failed"] == {}
    # and Redis refused neither user anything (its ACL LOG)
    refused = [e for e in tls_redis.client().acl_log(200) if e.get("username") in USERS]
    assert refused == []
    # and no password, key path's content or raw response reached the CLI's or worker's output
    text = said + log.read_text() + out.read_text()
    assert SECRET not in text
    for password in tls_redis.users.passwords.values():
        assert password not in text
    assert tls_redis.certs.client.key.read_text() not in text
