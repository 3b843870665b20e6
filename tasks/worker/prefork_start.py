"""A prefork worker whose pool process is killed while the worker starts keeps running.

Celery checks once, right after the consumer is ready, that every pool process it forked is
still alive (``celery.worker.loops.asynloop``: ``if not restart_count and not
pool.did_start_ok(): raise WorkerLostError('Could not start worker processes')``), so that a
child that cannot start (an import error: it exits with a code) stops the worker at once.
The same check also stopped the worker when a child had been *killed* in those first
milliseconds (a signal: the OOM killer, an operator's ``kill -9``), although a moment later the
same death only gets the child replaced. The chaos run found it: 3 unplanned exits in three
30-minute runs, each a ``kill -9`` of a prefork child landing as a restarted prefork worker
started.

Here a child that ended by a signal does not fail the start check: the pool replaces it as it
would a moment later (billiard's ``maintain_pool`` runs when a child exits and every 5 s). A
child that exited with a code still stops the worker, as Celery meant.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.concurrency.prefork import TaskPool

logger = logging.getLogger(__name__)


def killed_children_do_not_fail_the_start(sender: Any = None, **_: Any) -> None:
    """``worker_ready`` (sent by the consumer just before the check; connected in
    ``tasks.worker.signals``): the pool's
    ``did_start_ok`` passes when every child that ended was killed by a signal."""
    pool = getattr(sender, "pool", None)
    if not isinstance(pool, TaskPool):
        return  # not a prefork pool: nothing to check
    processes = getattr(pool._pool, "_pool", None)
    if not isinstance(processes, list):
        return
    strict = pool.did_start_ok

    def did_start_ok() -> bool:
        ended = [code for code in (p.exitcode for p in list(processes)) if code is not None]
        if ended and all(code < 0 for code in ended):
            logger.warning(
                "%d pool process(es) killed by a signal while the worker started: replaced",
                len(ended),
            )
            return True
        return bool(strict())

    pool.did_start_ok = did_start_ok
