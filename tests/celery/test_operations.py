"""docker-compose.yml and the Procfile: the compose file is checked for what `docker compose
config` needs (no Docker engine here), and the Procfile's processes really start under honcho
against the local Redis and run a call end to end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from boundary import InvocationStatus, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import PROJECTIONS_QUEUE, REPROJECTIONS_QUEUE, TOOLS_QUEUE, create_app
from tests.celery.conftest import RUN
from tests.celery.workers import ROOT, settings_env
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.helpers import wait_until
from tests.support.servers import free_port, release_port

COMPOSE_KEYS = {"name", "services", "volumes", "networks", "configs", "secrets"}
SERVICE_KEYS = {
    "build", "image", "command", "environment", "depends_on", "healthcheck", "ports",
    "restart", "volumes",
}  # fmt: skip


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_file_has_the_services_with_health_checks(compose: dict[str, Any]) -> None:
    assert set(compose) - COMPOSE_KEYS <= {k for k in compose if k.startswith("x-")}
    services = compose["services"]
    assert set(services) == {
        "redis",
        "worker-tools",
        "worker-long",
        "worker-projections",
        "worker-reprojections",
        "beat",
        "flower",
        "web",
    }
    for name, service in services.items():
        assert set(service) <= SERVICE_KEYS, name
        assert "image" in service or "build" in service, name
        check = service["healthcheck"]
        assert isinstance(check["test"], list) and check["test"][0] in {"CMD", "CMD-SHELL"}, name
        for field in ("interval", "timeout"):
            assert re.fullmatch(r"\d+s", check[field]), (name, field)
        if name != "redis":
            assert service["depends_on"] == {"redis": {"condition": "service_healthy"}}
    build = services["worker-tools"]["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).is_file()


def test_compose_workers_cover_both_queues_and_settings_are_real(compose: dict[str, Any]) -> None:
    services = compose["services"]
    queues = {
        service["command"][service["command"].index("-Q") + 1]
        for name, service in services.items()
        if name.startswith("worker-")
    }
    # (``long``: the queue of long-running tools, ``ToolSpec(queue="long")``;
    # ``reprojections``: re-projection jobs' chunks)
    assert queues == {TOOLS_QUEUE, PROJECTIONS_QUEUE, "long", REPROJECTIONS_QUEUE}
    fields = {f"TOOL_BOUNDARY_{name.upper()}" for name in Settings.model_fields}
    for name, service in services.items():
        own = {"TOOL_BOUNDARY_WEB_TOKEN"} if name == "web" else set()
        assert set(service.get("environment", {})) <= fields | own
        if name == "web":
            assert service["command"][:2] == ["tool-boundary", "web"]
        elif "command" in service and name != "redis":
            assert service["command"][:3] == ["celery", "-A", "tasks"]


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and line[0] != "#")


def test_procfile_has_the_same_processes_as_compose(compose: dict[str, Any]) -> None:
    processes = procfile()
    assert set(processes) == {
        "worker_tools", "worker_long", "worker_projections", "worker_reprojections", "beat",
        "flower", "web",
    }  # fmt: skip
    assert {p.replace("_", "-") for p in processes} == set(compose["services"]) - {"redis"}
    for name, command in processes.items():
        # The venv's programs (the active one, else .venv's): no activated venv needed.
        if name == "web":
            assert command.startswith('"${VIRTUAL_ENV:-.venv}/bin/tool-boundary" web ')
        else:
            assert command.startswith('"${VIRTUAL_ENV:-.venv}/bin/celery" -A tasks ')


def test_procfile_processes_start_under_honcho_and_serve_a_call(
    redis_client: redis.Redis, celery_session_app: object, tmp_path: Path
) -> None:
    # Given the Procfile's processes under honcho, on a broker DB of their own
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB), reap_interval_s=1)
    broker = flush_db(SUBPROCESS_BROKER_DB)
    web_port = free_port()
    env = settings_env(settings) | {
        "FLOWER_PORT": "0", "WEB_PORT": str(web_port), "TMPDIR": str(tmp_path),
    }  # fmt: skip
    # As after `.venv/bin/honcho start` with no venv activated: celery is not on the PATH.
    env["PATH"] = "/usr/bin:/bin"
    env.pop("VIRTUAL_ENV", None)
    if Path(sys.prefix) != ROOT / ".venv":
        env["VIRTUAL_ENV"] = sys.prefix  # the suite runs from another venv
    log = tmp_path / "honcho.log"
    with log.open("wb") as out:
        honcho = subprocess.Popen(
            [str(Path(sys.executable).with_name("honcho")), "start"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        expected = [
            "tools@", "projections@", "beat: Starting", "Visit me at", "tool-boundary web: http",
        ]  # fmt: skip
        deadline = time.monotonic() + 60

        def started() -> bool:
            assert honcho.poll() is None, log.read_text()[-3000:]
            return all(text in log.read_text() for text in expected)

        wait_until(started, f"every process to start (log: {log})", 60, every=0.2)
        wait_until(
            lambda: log.read_text().count(" ready.") >= 2,
            f"both workers to be ready (log: {log})",
            deadline - time.monotonic(),
            every=0.2,
        )
        # When a call is made through them
        app = create_app(settings, name="tests_honcho")
        boundary = get_runtime().boundary(CeleryDispatcher(app))
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id="c1", tool_name="lookup", arguments={"query": "q"}
        )
        outcome = boundary.invoke(envelope, RUN, timeout=30)
        # Then it ends READY, and beat has the reaper running on the projections worker
        assert outcome.status is InvocationStatus.READY
        # And the web view shows its run
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/runs/{RUN.run_id}") as page:
            assert 'id="call-c1"' in page.read().decode()
        wait_until(
            lambda: "Task tool_boundary.reap[" in log.read_text(),
            f"beat's reaper pass to run (log: {log})",
            deadline - time.monotonic(),
            every=0.2,
        )
    finally:
        os.killpg(honcho.pid, signal.SIGTERM)
        try:
            honcho.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait()
        broker.flushdb()
        release_port(web_port)


def test_compose_keeps_redis_durable_private_and_flower_behind_auth(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    redis_command = " ".join(services["redis"]["command"])
    # Records, duplicate marks and budgets survive a restart and are never evicted
    assert "--appendonly yes" in redis_command
    assert "--maxmemory-policy noeviction" in redis_command
    assert "--requirepass ${REDIS_PASSWORD" in redis_command
    assert services["redis"]["volumes"] == ["redis-data:/data"]
    # Nothing is published on all interfaces
    for service in services.values():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), port
    # Flower asks for a password; workers refuse a store without persistence
    assert any(arg.startswith("--basic-auth=") for arg in services["flower"]["command"])
    app_env = services["worker-tools"]["environment"]
    assert app_env["TOOL_BOUNDARY_REQUIRE_PERSISTENCE"] == "true"
    assert app_env["TOOL_BOUNDARY_REDIS_URL"].startswith("redis://:${REDIS_PASSWORD")
