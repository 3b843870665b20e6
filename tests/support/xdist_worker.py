"""What an xdist worker (``PYTEST_XDIST_WORKER`` = gw0, gw1, ...) of a parallel run keeps to
itself, decided when the root conftest is imported, before ``tests.support.settings.SUITE``
is built.

- ``TB_TEST_SERVER_PORTS``: worker N takes ``21200+100N``-``21299+100N`` (gw0 the default
  range), or the N-th equal slice of the range the user set, so the Redis servers the tests
  start never race for a port; their cluster bus (port + 10000) stays below the ephemeral
  ports (32768 and up) up to gw14.
- Redis: gw0 uses the configured server (``TB_TEST_REDIS_*``, by default 127.0.0.1:6379 with
  DBs 11, 12, 13 and 10). Every other worker starts a ``redis-server`` of its own on the first
  port of its range, with the same DB numbers, stopped when the worker ends (and by the
  kernel if the worker is killed). A private server, rather than four other DBs of the shared
  one, because much of what the tests check is server-wide: Pub/Sub channels (not scoped by
  DB; the seal channels are named by run id, and every worker uses the same run ids),
  ``CLIENT LIST``/``CLIENT KILL``, ``INFO``; and because DBs 6-9 would leave room for one more
  worker only.
- RabbitMQ: not here. The tests that use it are in the ``xdist_group`` ``amqp`` (one worker
  runs them all, ``--dist loadgroup``), so no two workers consume the same queues of vhost ``/``.

A variable the user set is left as it is (the port range is sliced among the workers),
except that a worker other than gw0 cannot share an explicitly named Redis server (its DBs
would collide with gw0's): that stops the run.
Outside xdist, or with ``-n 0``/``-p no:xdist``, nothing changes.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

#: The default ``TB_TEST_SERVER_PORTS`` starts here; each worker gets this many ports.
FIRST_PORT = 21200
PORTS_PER_WORKER = 100

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def worker_index() -> int | None:
    """N of ``gwN``, or None outside an xdist worker."""
    found = re.fullmatch(r"gw(\d+)", WORKER)
    return int(found.group(1)) if found else None


def _start_private_redis() -> None:
    """This worker's own redis-server; ``TB_TEST_REDIS_HOST``/``PORT`` point at it."""
    # Imported only now: tests.support.servers reads TB_TEST_SERVER_PORTS when imported.
    from tests.support.servers import RedisServer, release_port

    directory = Path(tempfile.mkdtemp(prefix=f"tb-test-{WORKER}-redis-"))
    # Configured like the CI's shared server: no snapshots, no AOF.
    server = RedisServer(directory, "--appendonly", "no", die_with_parent=True)
    server.start()

    def stop() -> None:
        server.stop()
        release_port(server.port)
        shutil.rmtree(directory, ignore_errors=True)

    atexit.register(stop)
    os.environ["TB_TEST_REDIS_HOST"] = "127.0.0.1"
    os.environ["TB_TEST_REDIS_PORT"] = str(server.port)


def worker_ports(named: str | None, index: int, workers: int) -> str:
    """Worker ``index``'s ports: its hundred of the default range, or its equal slice of the
    range the user named (``first-last``), so no two workers ever race for one port."""
    if named is None:
        first = FIRST_PORT + PORTS_PER_WORKER * index
        return f"{first}-{first + PORTS_PER_WORKER - 1}"
    first, last = (int(part) for part in named.split("-"))
    size = (last - first + 1) // max(workers, 1)
    if size < 1:
        raise RuntimeError(f"TB_TEST_SERVER_PORTS={named} has fewer ports than {workers} workers")
    start = first + size * index
    return f"{start}-{start + size - 1}"


#: Set once a worker has decided (its subprocesses inherit it, and decide nothing again).
DECIDED = "TB_TEST_XDIST_DECIDED"


def isolate() -> None:
    index = worker_index()
    if index is None or os.environ.get(DECIDED) == WORKER:
        return
    os.environ[DECIDED] = WORKER
    os.environ["TB_TEST_SERVER_PORTS"] = worker_ports(
        os.environ.get("TB_TEST_SERVER_PORTS"),
        index,
        int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1),
    )
    if index == 0:
        return
    named = [v for v in ("TB_TEST_REDIS_HOST", "TB_TEST_REDIS_PORT") if v in os.environ]
    if named:
        raise RuntimeError(
            f"{' and '.join(named)} set: every xdist worker would use that one Redis server "
            f"and the same DBs. Run serially (-n 0), or unset {' and '.join(named)} (worker "
            f"{WORKER} then starts a redis-server of its own)"
        )
    _start_private_redis()
