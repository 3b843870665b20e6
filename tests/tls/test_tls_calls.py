"""Calls over TLS only (verified server certificate, client certificates required), every
process as its own ACL user of the shipped file: a threads and a prefork worker seal READY."""

from __future__ import annotations

from pathlib import Path

import pytest

from boundary import InvocationStatus, RunContext, ToolCallEnvelope
from tests.tls.servers import TlsRedisServer
from tests.tls.stack import caller, worker

RUN = RunContext(run_id="run-tls", authorized_tools=frozenset({"lookup", "boom", "sleepy"}))


@pytest.mark.parametrize(("pool", "broker_db"), [("threads", 0), ("prefork", 0)])
def test_a_call_is_ready_through_a_worker_over_tls(
    tls_redis: TlsRedisServer, tmp_path: Path, pool: str, broker_db: int
) -> None:
    boundary = caller(tls_redis, broker_db)
    log = tmp_path / "worker.log"
    with worker(tls_redis, log, broker_db, pool=pool):
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id,
            tool_call_id=f"c-{pool}",
            tool_name="lookup",
            arguments={"query": "tls"},
        )
        outcome = boundary.invoke(envelope, RUN, timeout=30)
    assert outcome.status is InvocationStatus.READY, (outcome, log.read_text()[-3000:])
    text = log.read_text()
    for password in tls_redis.users.passwords.values():
        assert password not in text
