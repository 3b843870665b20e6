"""A TLS user's password (every character that splits a URL) and the client's key material
never printed: not by a worker's DEBUG log through a whole call, not by the CLI (reachable or
not), not in the broker URL Celery (and so Flower) displays, not in a metric label or a span
(the OpenTelemetry SDK and prometheus-client of the dev extra, all offline)."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from bench.rig import workers as rig
from boundary import (
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks import CeleryDispatcher
from tasks.wiring.app import create_app
from tests.celery.workers import ROOT, celery_process, settings_env
from tests.conftest import celery_test_settings
from tests.support import otel
from tests.support.celery_tools import registry
from tests.support.helpers import wait_until
from tests.support.servers import free_port, release_port
from tests.tls.servers import TlsRedisServer, add_user, role_rules
from tests.tls.stack import caller, worker

PASSWORD = "pwA/pwB#pwC?pwD@pwE:pwF%pwG"
PIECES = ("pwA", "pwB", "pwC", "pwD", "pwE", "pwF", "pwG")
RUN = RunContext(run_id="run-secret", authorized_tools=frozenset({"lookup", "boom"}))


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


def test_no_password_or_key_in_a_metric_label_or_a_span(
    tls_redis: TlsRedisServer, tmp_path: Path
) -> None:
    """Telemetry with TLS and ACL URLs: the caller's spans and metrics (in memory), a prefork
    worker's spans (a file) and its ``/metrics`` (Prometheus' exposition), through a READY, an
    ERROR, and a store that cannot be reached (a closed port: the error path's span)."""
    otel.install()
    add_user(tls_redis, "tb-secret", PASSWORD, role_rules("worker"))
    url = tls_redis.url_as("tb-secret", PASSWORD, 0)
    settings = celery_test_settings(redis_url=url, broker_url=url, result_backend=url)
    port = free_port()
    span_file = tmp_path / "spans.jsonl"
    env = {
        "TOOL_BOUNDARY_TOOLS": "tests.support.otel_tools:registry",
        "TB_TEST_SPAN_FILE": str(span_file),
        "TOOL_BOUNDARY_METRICS_PORT": str(port),
    }
    log = tmp_path / "worker.log"
    boundary = ToolBoundary(
        store=RedisCanonicalStore.from_url(url, ttl_s=600),
        registry=registry,
        dispatcher=CeleryDispatcher(create_app(settings, name="tls_secret_otel")),
    )
    try:
        with celery_process(
            settings,
            *rig.worker_args("prefork", 2, ("tools", "projections"), node="tls-otel@%h"),
            log=log,
            timeout_s=60,
            extra_env=env,
        ):
            for call_id, tool in (("o1", "lookup"), ("o2", "boom")):
                outcome = boundary.invoke(envelope(call_id, tool), RUN, timeout=30)
                assert outcome.status is not InvocationStatus.PROJECTING, outcome
            wait_until(
                lambda: all(f'tool="{t}"' in scrape(port) for t in ("lookup", "boom")),
                "the worker's metrics of both calls",
            )
            exposition = scrape(port)
            wait_until(lambda: len(otel.read_span_file(span_file)) >= 4, "the worker's spans")
    finally:
        release_port(port)
    # A store the caller cannot reach: its error path's spans and metrics too
    closed = url.replace(f":{tls_redis.port}/", ":1/")
    unreachable = ToolBoundary(
        store=RedisCanonicalStore.from_url(closed, ttl_s=600),
        registry=registry,
        dispatcher=CeleryDispatcher(create_app(settings, name="tls_secret_closed")),
    )
    refused = unreachable.submit(envelope("o3", "lookup"), RUN)
    assert refused.outcome is not None and refused.outcome.error_code is not None
    # Then no piece of the password, nor the key, is in any of them
    assert "tool_boundary" in exposition, exposition[:2000]
    no_secret(exposition, tls_redis)
    no_secret(span_file.read_text(), tls_redis)
    spans = otel.SPANS.get_finished_spans()
    assert any((s.attributes or {}).get("gen_ai.tool.call.id") == "o3" for s in spans)
    no_secret("\n".join(span.to_json(indent=None) for span in spans), tls_redis)
    data = otel.METRICS.get_metrics_data()
    assert data is not None
    no_secret(data.to_json(indent=None), tls_redis)


def envelope(call_id: str, tool: str) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments={"query": call_id}
    )


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())
