"""Worker subprocesses' tools for ``tests/celery/test_prefork_start.py``: the Celery tests'
registry, and a pool process that kills itself (SIGKILL) as it starts, once per marker file
(``TB_TEST_KILL_CHILD_MARKER``). The worker's ``worker_ready`` (sent just before Celery's
start check) waits until that child is dead, so the check always sees it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from celery import signals

from tests.support.celery_tools import registry

#: The marker file: created (with its pid) by the first pool process, which then kills itself.
MARKER_ENV = "TB_TEST_KILL_CHILD_MARKER"

__all__ = ["MARKER_ENV", "registry"]


def _marker() -> Path | None:
    path = os.environ.get(MARKER_ENV)
    return Path(path) if path else None


@signals.worker_process_init.connect
def _die_once(**_: Any) -> None:
    marker = _marker()
    if marker is None:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in {"Z", "X"}


@signals.worker_ready.connect
def _wait_for_the_death(**_: Any) -> None:
    marker = _marker()
    if marker is None:
        return
    give_up = time.monotonic() + 20
    # Not wait_until: runs in the worker at its start, which goes on after 20 s whatever
    while time.monotonic() < give_up:
        try:
            pid = int(marker.read_text() or "0")
        except (OSError, ValueError):
            pid = 0
        if pid and _dead(pid):
            return
        time.sleep(0.02)
