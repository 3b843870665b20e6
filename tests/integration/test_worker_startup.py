"""A worker (``celery -A tasks worker``) whose store, broker or result backend does not answer
at start: a bounded number of attempts (``TOOL_BOUNDARY_STARTUP_ATTEMPTS``), one warning line
per failed attempt, then one line naming host:port/db and exit 3. Never a traceback, never a
password, even one with ``/ # ?`` in it; and a worker started before its Redis starts once the
Redis is up.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tasks.exits import EXIT_UNAVAILABLE
from tests.celery.workers import celery_process, run_stopping_worker, settings_env
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, redis_url
from tests.support.helpers import wait_until
from tests.support.servers import RedisServer

#: Seconds a worker may take to give up or to start (only a hung worker reaches it).
PROCESS_TIMEOUT_S = 120
#: A password with the characters that split a URL, percent-encoded as a setting must be.
PASSWORD = "p%2Fw%23x%3Fy"
#: Every form of it that must never be printed.
PASSWORD_FORMS = (PASSWORD, "p/w#x?y", "p%2Fw", "x%3Fy", "p/w", "x?y")


def closed(scheme: str = "redis", where: str = "0") -> str:
    return f"{scheme}://user:{PASSWORD}@127.0.0.1:1/{where}"


CASES = [
    ("TOOL_BOUNDARY_REDIS_URL", closed(), "store", "127.0.0.1:1/0"),
    ("TOOL_BOUNDARY_BROKER_URL", closed(), "broker", "127.0.0.1:1/0"),
    ("TOOL_BOUNDARY_BROKER_URL", closed("amqp", "vhost"), "broker", "127.0.0.1:1/vhost"),
    ("TOOL_BOUNDARY_RESULT_BACKEND", closed(), "result backend", "127.0.0.1:1/0"),
]


@pytest.mark.parametrize(
    ("variable", "url", "part", "where"), CASES, ids=[f"{c[2]}-{c[1][:4]}" for c in CASES]
)
def test_an_unreachable_service_stops_the_worker_after_its_attempts_with_exit_3(
    variable: str, url: str, part: str, where: str, redis_client: redis.Redis
) -> None:
    # Given a worker whose other services answer, and this one is a closed port
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))
    env = settings_env(settings) | {variable: url, "TOOL_BOUNDARY_STARTUP_ATTEMPTS": "2"}

    # When it starts
    done = run_stopping_worker(env, "-l", "INFO")

    # Then it tried twice, said so once in between, and stopped in one line with exit 3
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if "tool-boundary" in line]
    unreachable = f"the {part} at {where} is unreachable"
    assert ours == [
        f"tool-boundary worker: {unreachable} (attempt 1 of 2), trying again in 1s",
        f"tool-boundary worker cannot start: {unreachable} after 2 attempt(s)",
    ], done.stderr[-3000:]
    everything = done.stdout + done.stderr
    assert " ready." not in everything
    assert "Traceback" not in everything
    assert "Cannot connect" not in everything
    for form in PASSWORD_FORMS:
        assert form not in everything


def test_a_worker_started_before_its_store_starts_once_the_store_answers(
    tmp_path: Path, redis_client: redis.Redis
) -> None:
    # Given a store Redis that is not running yet (compose or a supervisor may start it later)
    store = RedisServer(tmp_path / "store")
    settings = celery_test_settings(redis_url=store.url, broker_url=redis_url(SUBPROCESS_BROKER_DB))
    log = tmp_path / "worker.log"
    try:
        with celery_process(
            settings,
            "worker",
            "-Q",
            "tools",
            "-P",
            "threads",
            "-l",
            "INFO",
            "--without-mingle",
            "--without-gossip",
            log=log,
            # The worker is waiting: its first failed attempt is logged.
            ready_text="(attempt 1 of 1000)",
            timeout_s=PROCESS_TIMEOUT_S,
            extra_env={"TOOL_BOUNDARY_STARTUP_ATTEMPTS": "1000", "C_FORCE_ROOT": "1"},
        ) as proc:
            # When the store starts
            store.start()

            # Then the worker starts (the wait only fails a hung test)
            def ready() -> bool:
                assert proc.poll() is None, log.read_text()[-3000:]
                return " ready." in log.read_text(errors="replace")

            wait_until(ready, f"the worker to start (log: {log})", PROCESS_TIMEOUT_S, every=0.1)
    finally:
        store.stop()
    text = log.read_text(errors="replace")
    assert "cannot start" not in text
    assert "Traceback" not in text
    assert f"the store at 127.0.0.1:{store.port}/0 is unreachable" in text
