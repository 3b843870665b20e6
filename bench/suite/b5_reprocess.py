"""B5: batch reprocessing of many sealed runs through a real worker (``tasks.worker.runs``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from celery import Celery

from bench.suite.fixtures import write_sealed
from boundary import CanonicalKey, RedisCanonicalStore


@dataclass(frozen=True)
class Reprocessed:
    runs: int
    calls_per_run: int
    write_s: float
    reprocess_s: float
    facts: int
    failed: int

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.reprocess_s

    @property
    def calls_written_per_s(self) -> float:
        return self.runs * self.calls_per_run / self.write_s

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "runs_per_s": self.runs_per_s,
            "calls_written_per_s": self.calls_written_per_s,
        }


def run_ids(runs: int) -> list[str]:
    return [f"b5-run-{n}" for n in range(runs)]


def _keys(ids: list[str], calls_per_run: int) -> Iterator[CanonicalKey]:
    for run_id in ids:
        for n in range(calls_per_run):
            yield CanonicalKey(run_id=run_id, tool_call_id=f"call_{n}")


def write_runs(
    store: RedisCanonicalStore, runs: int, calls_per_run: int
) -> tuple[list[str], float]:
    """Writes ``runs`` sealed runs; returns their ids and the seconds it took."""
    ids = run_ids(runs)
    began = time.perf_counter()
    write_sealed(store, _keys(ids, calls_per_run))
    return ids, time.perf_counter() - began


def reprocess(
    celery_app: Celery, ids: list[str], calls_per_run: int, write_s: float
) -> Reprocessed:
    """Reprocesses ``ids`` with ``tasks.wiring.reproject.reproject`` and checks every line."""
    from tasks.wiring.reproject import reproject

    facts = failed = 0
    began = time.perf_counter()
    for line in reproject(ids, celery_app=celery_app):
        if "error" in line:
            failed += 1
        else:
            facts += len(line["facts"])
    elapsed = time.perf_counter() - began
    return Reprocessed(len(ids), calls_per_run, write_s, elapsed, facts, failed)
