"""A TLS user's password (every character that splits a URL) and the client's key material
never printed: not by a worker's DEBUG log through a whole call, not by the CLI (reachable or
not), not in the broker URL Celery (and so Flower) displays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from boundary import InvocationStatus, RunContext, ToolCallEnvelope
from tasks.wiring.app import create_app
from tests.celery.workers import ROOT, settings_env
from tests.conftest import celery_test_settings
from tests.tls.servers import TlsRedisServer, add_user, role_rules
from tests.tls.stack import caller, worker

PASSWORD = "pwA/pwB#pwC?pwD@pwE:pwF%pwG"
PIECES = ("pwA", "pwB", "pwC", "pwD", "pwE", "pwF", "pwG")
RUN = RunContext(run_id="run-secret", authorized_tools=frozenset({"lookup"}))


def no_secret(text: str, server: TlsRedisServer) -> None:
    leaked = [piece for piece in PIECES if piece in text]
    assert not leaked, f"password pieces printed: {leaked}\n{text[-2000:]}"
    key = server.certs.client.key.read_text().splitlines()[1]
    assert key not in text and "PRIVATE KEY" not in text, text[-2000:]


def test_a_tls_users_password_and_key_are_never_printed(
    tls_redis: TlsRedisServer, tmp_path: Path
) -> None:
    add_user(tls_redis, "tb-secret", PASSWORD, role_rules("worker"))
    url = tls_redis.url_as("tb-secret", PASSWORD, 0)
    settings = celery_test_settings(redis_url=url, broker_url=url, result_backend=url)
    # The broker URL Celery shows (Flower's "broker" field, `celery inspect`): masked
    shown = create_app(settings, name="tls_secret").connection_for_read().as_uri()
    assert "localhost" in shown
    no_secret(shown, tls_redis)
    # A worker's DEBUG log through a whole call
    log = tmp_path / "worker.log"
    users = tls_redis.users
    users.passwords["secret"] = PASSWORD
    try:
        with worker(tls_redis, log, 0, role="secret", level="DEBUG"):
            outcome = caller(tls_redis, 0).invoke(
                ToolCallEnvelope(
                    run_id=RUN.run_id,
                    tool_call_id="s1",
                    tool_name="lookup",
                    arguments={"query": "s"},
                ),
                RUN,
                timeout=30,
            )
    finally:
        del users.passwords["secret"]
    assert outcome.status is InvocationStatus.READY, log.read_text()[-3000:]
    no_secret(log.read_text(), tls_redis)
    # The CLI, reachable and not (a closed port)
    script = Path(sys.executable).with_name("tool-boundary")
    closed = url.replace(f":{tls_redis.port}/", ":1/")
    for target, command in ((url, ["show", RUN.run_id, "s1"]), (closed, ["runs"])):
        done = subprocess.run(
            [str(script), *command],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=settings_env(settings) | {"TOOL_BOUNDARY_REDIS_URL": target},
        )
        no_secret(done.stdout + done.stderr, tls_redis)
        assert "Traceback" not in done.stderr, done.stderr
