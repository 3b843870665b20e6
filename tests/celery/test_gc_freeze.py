"""``worker_gc_freeze``: a worker freezes its start-up heap for the garbage collector before
its prefork pool forks (its children inherit it frozen); off, the collector keeps its
defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.gc_probe import PROBE_ENV
from tests.support.helpers import wait_until

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("freeze", [True, False])
def test_a_worker_freezes_its_start_up_heap_only_when_set(freeze: bool, tmp_path: Path) -> None:
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB),
        tools="tests.support.gc_probe:registry",
        worker_gc_freeze=freeze,
    )
    flush_db(SUBPROCESS_BROKER_DB)
    probe = tmp_path / "frozen"
    log = tmp_path / "w.log"
    # Given a prefork worker started with the setting on (or off)
    with celery_process(
        settings,
        *worker_args("gc-freeze", pool="prefork", concurrency=1),
        log=log,
        extra_env={PROBE_ENV: str(probe)},
    ):
        # (the worker answers its first ping before its pool process may have started)
        wait_until(probe.exists, "the pool process reports its frozen count")
        text = log.read_text(errors="replace")
    # Then its pool process started with the worker's start-up objects frozen (or none)
    frozen = int(probe.read_text())
    if freeze:
        assert frozen > 10_000, text[-3000:]
    else:
        assert frozen == 0, text[-3000:]
