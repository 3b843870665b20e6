"""DBOS as a peer (``--peers dbos``): its database, its worker processes and its client side.

The bench makes a database of its own on the PostgreSQL server (``--pg-url``), named
``<prefix>_<pid>``, starts one DBOS worker process per polling setting on it
(``bench.peers.dbos_worker``, each listening to a queue of its own), enqueues from this process
through ``DBOSClient`` and drops the database at the end, whatever happened.

Two sides: ``dbos`` polls its queue and the caller polls the workflow's result every
``TUNED_POLLING_S`` (what a DBOS user tunes for latency); ``dbos_defaults`` keeps DBOS's
defaults for both (1 s).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.rig.workers import Pool

ROOT = Path(__file__).resolve().parents[2]
#: The PostgreSQL server the DBOS peer uses when ``--pg-url`` is not given.
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
#: The bench's databases are ``<prefix>_<pid>``.
DEFAULT_DB_PREFIX = "tb_bench_dbos"
#: Queue and result polling of the tuned side, seconds; the defaults side keeps DBOS's 1 s.
TUNED_POLLING_S = 0.01
DEFAULT_POLLING_S = 1.0
#: Seconds a DBOS worker may take to launch (migrations of a new database included).
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
#: Longest wait for one workflow's result, seconds.
CALL_TIMEOUT_S = 120.0

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def require_dbos() -> None:
    """Fails with one line when the ``dbos`` extra is not installed."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        raise SystemExit("bench: --peers dbos needs DBOS: pip install -e '.[dbos]'") from None


def database_url(server_url: str, name: str) -> str:
    """``server_url`` (a ``postgresql://`` URL) pointed at database ``name``."""
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


@contextmanager
def own_database(server_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database ``<prefix>_<pid>`` on ``server_url``; yields its URL and drops
    it (with any connection left to it) at the end."""
    import psycopg

    name = f"{prefix}_{os.getpid()}"
    if not _NAME.match(name):
        raise ValueError(f"not a database name the bench makes: {name!r}")
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _worker_env() -> dict[str, str]:
    """This environment without DBOS's own variables (a Conductor or cloud key would make
    the worker reach out), with the repository on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBOS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


class DbosWorkerProcess:
    """One ``python -m bench.peers.dbos_worker`` in its own process group, started, awaited and
    stopped like a Celery worker (``bench.rig.workers.WorkerProcess``)."""

    def __init__(
        self, *, name: str, db_url: str, queue: str, pool: Pool, polling_s: float, log_dir: Path
    ) -> None:
        from bench.peers.dbos_worker import READY_LINE

        self.name = name
        self._ready_line = READY_LINE
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log = log_dir / f"{name}-{pool.name}{pool.concurrency}.log"
        command = [
            sys.executable,
            "-m",
            "bench.peers.dbos_worker",
            "--db",
            db_url,
            "--queue",
            queue,
        ]
        command += ["--concurrency", str(pool.concurrency), "--polling", str(polling_s)]
        with self.log.open("ab") as out:
            # The log is appended to: an earlier run's ready line (the same --out) is not ours.
            self._log_start = out.tell()
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=_worker_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pgid(self) -> int:
        return self.proc.pid

    def _own_log(self) -> str:
        """What this process wrote to its log."""
        with self.log.open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def await_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while self._ready_line not in self._own_log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self._own_log()[-2000:]
                raise RuntimeError(f"DBOS worker {self.name} did not start; its log ends:\n{tail}")
            time.sleep(0.1)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.pgid, 15)

    def stop(self) -> None:
        self.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.pgid, 9)
            self.proc.wait()


class DbosSide:
    """Enqueues the tool-call workflow through ``DBOSClient`` (workflow id ``run:call``) and
    waits on its result, polling every ``polling_s``. Sides alike: ``send``, ``wait``,
    ``invoke`` (``bench.suite.sides.Side``)."""

    def __init__(self, name: str, db_url: str, polling_s: float) -> None:
        from dbos import DBOSClient

        from bench.peers.dbos_worker import APP_NAME

        self.name = name
        self.queue = name
        self.polling_s = polling_s
        self.client = DBOSClient(system_database_url=db_url, application_name=APP_NAME)

    def send(self, run_id: str, tool_call_id: str) -> Any:
        from bench.peers.dbos_worker import WORKFLOW

        options: Any = {
            "workflow_name": WORKFLOW,
            "queue_name": self.queue,
            "workflow_id": f"{run_id}:{tool_call_id}",
        }
        return self.client.enqueue(options, run_id, tool_call_id)

    def wait(self, handle: Any) -> None:
        result = handle.get_result(polling_interval_sec=self.polling_s)
        if not isinstance(result, dict) or result.get("status") != "READY":
            raise RuntimeError(f"{self.name} workflow failed")

    def invoke(self, run_id: str, tool_call_id: str) -> None:
        self.wait(self.send(run_id, tool_call_id))

    def close(self) -> None:
        self.client.destroy()


#: (side name, queue and result polling in seconds) of each DBOS side.
SIDES = (("dbos", TUNED_POLLING_S), ("dbos_defaults", DEFAULT_POLLING_S))
