"""B5: facts from sealed projections, batch reprocessing of many sealed runs
(``tasks.wiring.reproject.reproject``, the ``projections`` queue), through real workers of
their own: ``WORKERS`` processes of ``POOL`` on that queue alone (a reprocessing job's
workers, as ``python -m bench.studies.b8_reproject`` has always measured them), on records of
the example RAG tool (``bench.suite.fixtures.write_rag_runs``). Every line is checked; the
figure is the median of ``passes`` passes over the same runs."""

from __future__ import annotations

import statistics
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from celery import Celery

from bench.rig.workers import Pool, WorkerProcess, running
from bench.suite.fixtures import EXAMPLE_TOOLS, write_rag_runs
from boundary import RedisCanonicalStore
from tasks.settings import Settings
from tasks.wiring.app import PROJECTIONS_QUEUE

#: The reprocessing workers: processes, and each one's pool.
WORKERS = 2
POOL = Pool("threads", 4)
#: The prefix of B5's run ids.
RUN_PREFIX = "b5-run"


@dataclass(frozen=True)
class Reprocessed:
    runs: int
    calls_per_run: int
    write_s: float
    #: Seconds of each pass over every run.
    passes_s: list[float]
    facts: int
    failed: int
    workers: str = field(default=f"{WORKERS} x {POOL.label}")

    @property
    def runs_per_s(self) -> float:
        """The median pass's runs a second."""
        return self.runs / statistics.median(self.passes_s)

    @property
    def calls_written_per_s(self) -> float:
        return self.runs * self.calls_per_run / self.write_s

    def as_dict(self) -> dict[str, Any]:
        rates = [self.runs / s for s in self.passes_s]
        return asdict(self) | {
            "runs_per_s": self.runs_per_s,
            "passes_runs_per_s": rates,
            "spread": [min(rates), max(rates)],
            "calls_written_per_s": self.calls_written_per_s,
        }


def run_ids(runs: int, prefix: str = RUN_PREFIX) -> list[str]:
    return [f"{prefix}-{n}" for n in range(runs)]


def write_runs(
    store: RedisCanonicalStore, runs: int, calls_per_run: int
) -> tuple[list[str], float]:
    """Writes ``runs`` sealed runs of the example RAG tool; returns their ids and the seconds
    it took."""
    write_s = write_rag_runs(store, runs, calls_per_run, prefix=RUN_PREFIX)
    return run_ids(runs), write_s


def worker_settings(settings: Settings) -> Settings:
    """The reprocessing workers' settings: the bench's, with the example tools' registry."""
    return settings.model_copy(update={"tools": EXAMPLE_TOOLS})


def workers(
    celery_app: Celery,
    settings: Settings,
    queue: str,
    pool: Pool,
    processes: int,
    log_dir: Path,
    name: str = "b5",
) -> AbstractContextManager[list[WorkerProcess]]:
    """``processes`` workers of ``pool`` on ``queue`` alone, up for the block."""
    starts = [
        partial(
            WorkerProcess,
            module="tasks",
            name=f"{name}-{queue}-{n}",
            app=celery_app,
            settings=settings,
            pool=pool,
            queues=(queue,),
            log_dir=log_dir,
        )
        for n in range(processes)
    ]
    return running(*starts)


def one_pass(celery_app: Celery | None, ids: list[str]) -> tuple[float, int, int]:
    """One pass of ``reproject`` over ``ids``: seconds, facts, failed lines."""
    from tasks.wiring.reproject import reproject

    options = {} if celery_app is None else {"celery_app": celery_app}
    facts = failed = 0
    began = time.perf_counter()
    for line in reproject(ids, **options):
        if "error" in line:
            failed += 1
        else:
            facts += len(line["facts"])
    return time.perf_counter() - began, facts, failed


def reprocess(
    celery_app: Celery, ids: list[str], calls_per_run: int, write_s: float, passes: int
) -> Reprocessed:
    """``passes`` passes over ``ids`` (the workers up); each pass's lines are checked."""
    passes_s: list[float] = []
    facts = failed = 0
    for _ in range(passes):
        seconds, facts_of_pass, failed_of_pass = one_pass(celery_app, ids)
        passes_s.append(seconds)
        facts, failed = facts_of_pass, failed + failed_of_pass
    return Reprocessed(len(ids), calls_per_run, write_s, passes_s, facts, failed)


def measure(
    celery_app: Celery,
    store: RedisCanonicalStore,
    settings: Settings,
    runs: int,
    calls_per_run: int,
    passes: int,
    log_dir: Path,
) -> Reprocessed:
    """B5: writes the runs, starts the reprocessing workers, measures ``passes`` passes."""
    ids, write_s = write_runs(store, runs, calls_per_run)
    with workers(celery_app, worker_settings(settings), PROJECTIONS_QUEUE, POOL, WORKERS, log_dir):
        return reprocess(celery_app, ids, calls_per_run, write_s, passes)
