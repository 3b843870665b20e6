"""Worker subprocesses' tools for ``tests/celery/test_gc_freeze.py``: the Celery tests'
registry, and a prefork pool process that writes, as it starts, how many objects the garbage
collector holds frozen there (to the file named by ``TB_TEST_GC_PROBE``)."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

from celery import signals

from tests.support.celery_tools import registry

#: The file a pool process writes its ``gc.get_freeze_count()`` to.
PROBE_ENV = "TB_TEST_GC_PROBE"

__all__ = ["PROBE_ENV", "registry"]


@signals.worker_process_init.connect
def _report_frozen(**_: Any) -> None:
    path = os.environ.get(PROBE_ENV)
    if path:
        # Written whole or not at all: the test reads it as soon as it exists.
        written = Path(f"{path}.tmp")
        written.write_text(str(gc.get_freeze_count()))
        written.replace(path)
