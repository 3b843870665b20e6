"""The worker's garbage collector, tuned once its start-up is done (``worker_gc_freeze``).

``gc.freeze()`` moves every object alive at the end of ``worker_init`` (the imported modules,
the registry, the settings, Celery's app: nearly all of a worker's heap) to a permanent
generation the collector never scans again, so each full collection walks only what the
worker's calls allocate since. Prefork children forked after it inherit the frozen heap, and
the collector no longer writes to those objects' headers, so the pages stay shared with the
parent rather than copied (CPython's ``gc.freeze`` documentation). The cost: a start-up
object that later becomes garbage in a reference cycle is never collected; start-up objects
are meant to live as long as the worker. Connected in ``tasks.worker.signals``.
"""

from __future__ import annotations

import gc
from typing import Any

from tasks.runtime import get_runtime


def freeze_start_up_heap(**_: Any) -> None:
    """``worker_init``, last: with ``worker_gc_freeze``, collect once and freeze what is
    left (``gc.get_freeze_count()`` then says how many objects; logging is not set up yet)."""
    if not get_runtime().settings.worker_gc_freeze:
        return
    gc.collect()
    gc.freeze()
