"""A worker's side of format versions (``boundary.formats``): its start against the store's
marker, and a call whose message or record is of a newer format than it reads.

A call of a newer format fails with ``FORMAT_TOO_NEW``: one log line names both versions, the
call is sealed ERROR with the code (fenced to its attempt, so a newer worker's attempt is
never touched) and the task fails with the code only (Flower's "Failed"). Nothing is guessed.
"""

from __future__ import annotations

import logging
from typing import Any

from boundary import formats
from tasks.exits import EXIT_USAGE
from tasks.runtime import get_runtime

logger = logging.getLogger(__name__)


def check_store_format(**_: Any) -> None:
    """``worker_init``: exit 2, with one line, when the store holds a format this worker
    cannot read (a newer incompatible version wrote it: upgrade this worker); else the
    worker's format goes into the store's marker. A store that cannot say is left to the
    start-up's own checks (they run first)."""
    try:
        problem = formats.check_store(get_runtime().store.client)
    except Exception as exc:
        logger.warning("tool-boundary worker: store format not checked (%s)", type(exc).__name__)
        return
    if problem is not None:
        logger.critical("tool-boundary worker cannot start: %s", problem)
        raise SystemExit(EXIT_USAGE)
