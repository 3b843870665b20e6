"""Run projection as a Celery task, and batch reprocessing of many runs.

``project_run`` resolves a run's progress set through the canonical store and returns its
bounded observed facts; it only reads, so a run can be reprocessed any number of times.
``project_runs`` does the same for a chunk of runs in one task, with pipelined reads (two
round trips for the whole chunk) and one result for the chunk. ``reproject`` sends many runs
as such chunks and yields one line per run.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError

from boundary import (
    BoundaryError,
    CanonicalStore,
    ErrorCode,
    EvidenceStatus,
    ObservedFacts,
    RunProgressProjector,
    StoreError,
)
from boundary.models import is_safe_id
from boundary.reprojection import observe_version
from tasks.app import PROJECT_RUN, PROJECT_RUNS, app
from tasks.calls import retrying
from tasks.runtime import get_runtime

logger = logging.getLogger(__name__)

#: Runs per ``project_runs`` task: its reads are two pipelines, its result one message.
DEFAULT_CHUNK_SIZE = 100
#: Chunks sent but not yet collected: enough to keep a worker's pool busy while the client
#: reads results, few enough to bound the tasks waiting in the broker.
DEFAULT_MAX_IN_FLIGHT = 8
#: Seconds to wait for one chunk's result before its runs count as timed out.
DEFAULT_CHUNK_TIMEOUT_S = 300.0


class RunError(StrEnum):
    """Why a run's line holds an ``error`` instead of facts."""

    #: The store could not be read (in the task, after retries).
    STORE_UNAVAILABLE = ErrorCode.STORE_UNAVAILABLE.value
    #: The run id is not a safe identifier, so no run can have it.
    INVALID_RUN_ID = "INVALID_RUN_ID"
    #: The task failed for another reason (its type is in the worker's log).
    PROJECTION_FAILED = ErrorCode.PROJECTION_FAILED.value
    #: No result came back within the chunk timeout.
    TIMED_OUT = "TIMED_OUT"


class ReprojectError(BoundaryError):
    """The broker or the result backend failed while runs were reprocessed.

    Attributes:
        part: ``"broker"`` or ``"result backend"``.
    """

    code = ErrorCode.DISPATCH_FAILED

    def __init__(self, part: str) -> None:
        super().__init__()
        self.part = part


def _projector(store: CanonicalStore) -> RunProgressProjector:
    return RunProgressProjector(
        max_facts=store.limits.max_facts, max_facts_bytes=store.limits.max_facts_bytes
    )


def observe_run(
    store: CanonicalStore, run_id: str, projector_version: str | None = None
) -> ObservedFacts:
    """The run's observed facts: what ``ToolBoundary.observe`` returns, for readers that
    have a store but no registry or dispatcher (this task, the CLI)."""
    if projector_version is not None:
        return observe_version(store, run_id, projector_version, _projector(store))
    return _projector(store).project(run_id, store.progress(run_id))


def observe_runs(store: CanonicalStore, run_ids: list[str]) -> list[dict[str, Any]]:
    """One line per run id, in order: its observed facts as JSON (what ``observe_run`` gives),
    or an ``INVALID_RUN_ID`` error line. Every run's records are read in one batch."""
    safe = [run_id for run_id in run_ids if is_safe_id(run_id)]
    progress = store.progress_many(safe) if safe else {}
    projector = _projector(store)
    return [
        projector.project(run_id, progress[run_id]).model_dump(mode="json")
        if run_id in progress
        else error_line(None, RunError.INVALID_RUN_ID)
        for run_id in run_ids
    ]


def error_line(run_id: str | None, error: RunError) -> dict[str, Any]:
    return {"run_id": run_id, "error": error.value}


def _failed(what: str, exc: Exception) -> RunError:
    # Only the type: the text may hold a URL.
    logger.error("%s failed: %s", what, type(exc).__name__)
    return RunError.STORE_UNAVAILABLE if isinstance(exc, StoreError) else RunError.PROJECTION_FAILED


@app.task(name=PROJECT_RUN, acks_late=True)
def project_run(run_id: str) -> dict[str, Any]:
    """The run's bounded observed facts as JSON (never raw data), or an error line.

    Reads only: no canonical record, progress set or TTL is changed.
    """
    if not is_safe_id(run_id):
        return error_line(None, RunError.INVALID_RUN_ID)
    try:
        store = get_runtime().store
        facts = retrying(lambda: observe_run(store, run_id))
    except Exception as exc:
        return error_line(run_id, _failed(f"project_run {run_id}", exc))
    return facts.model_dump(mode="json")


@app.task(name=PROJECT_RUNS, acks_late=True)
def project_runs(run_ids: list[str]) -> list[dict[str, Any]]:
    """``project_run`` for a chunk of runs: one line per run id, in order.

    Reads only, in two round trips for the chunk; a store failure makes every line of the
    chunk an error line.
    """
    if not isinstance(run_ids, list) or not all(isinstance(r, str) for r in run_ids):
        return []
    try:
        store = get_runtime().store
        return retrying(lambda: observe_runs(store, run_ids))
    except Exception as exc:
        error = _failed(f"project_runs of {len(run_ids)} runs", exc)
        return [error_line(run_id if is_safe_id(run_id) else None, error) for run_id in run_ids]


@dataclass
class BatchSummary:
    """Totals of a reprocessing batch."""

    runs: int = 0
    projected: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    facts: int = 0
    evidence: int = 0
    negative: int = 0
    excluded: Counter[str] = field(default_factory=Counter)
    omitted: int = 0

    def add(self, line: dict[str, Any]) -> None:
        self.runs += 1
        if "error" in line:
            self.failed[str(line["error"])] += 1
            return
        self.projected += 1
        facts = line.get("facts", [])
        self.facts += len(facts)
        for fact in facts:
            status = fact.get("evidence_status")
            self.evidence += status == EvidenceStatus.EVIDENCE_FOUND.value
            self.negative += status == EvidenceStatus.NO_EVIDENCE.value
        self.excluded.update(line.get("excluded", {}))
        self.omitted += int(line.get("omitted", 0))

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "projected": self.projected,
            "failed": dict(sorted(self.failed.items())),
            "facts": self.facts,
            "evidence": self.evidence,
            "negative": self.negative,
            "excluded": dict(sorted(self.excluded.items())),
            "omitted": self.omitted,
        }


def _chunks(run_ids: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for run_id in run_ids:
        chunk.append(run_id)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@dataclass
class _Chunk:
    run_ids: list[str]
    result: Any  # celery.result.AsyncResult of a project_runs task


def _chunk_argsrepr(run_ids: list[str]) -> str:
    """What Flower shows of a chunk's arguments: ids only, and not a hundred of them."""
    if len(run_ids) <= 3:
        return repr((run_ids,))
    return f"([{run_ids[0]!r}, ... {run_ids[-1]!r}] ({len(run_ids)} runs),)"


class _Batch:
    """Sends chunks as ``project_runs`` tasks and collects each chunk's one result with a
    bounded wait."""

    def __init__(
        self, celery_app: Celery, timeout_s: float, queue: str | None, on_done: Callable[[], None]
    ) -> None:
        self.app = celery_app
        self.timeout_s = timeout_s
        self.queue = queue
        self.on_done = on_done

    def send(self, run_ids: list[str]) -> _Chunk:
        options = {} if self.queue is None else {"queue": self.queue}
        try:
            result = self.app.send_task(
                PROJECT_RUNS,
                args=(run_ids,),
                argsrepr=_chunk_argsrepr(run_ids),
                kwargsrepr="{}",
                **options,
            )
            # Subscribe now, not at the first wait: a result published in between would
            # otherwise be missed until the wait times out.
            self.app.backend.add_pending_result(result)
        except Exception:
            # kombu's errors name the broker URL: none of it goes further.
            raise ReprojectError("broker") from None
        return _Chunk(run_ids, result)

    def collect(self, chunk: _Chunk) -> list[dict[str, Any]]:
        result = chunk.result
        arrived = True
        try:
            try:
                value = result.get(
                    timeout=self.timeout_s, propagate=False, disable_sync_subtasks=False
                )
            except CeleryTimeoutError:
                # A slow worker or a missed wake-up: read the result key once more.
                self.app.backend.remove_pending_result(result)
                meta = self.app.backend.get_task_meta(result.id)
                arrived = meta.get("status") == "SUCCESS"
                value = meta.get("result")
            # The lines are ours now: the backend need not keep the chunk until it expires.
            result.forget()
        except Exception:
            raise ReprojectError("result backend") from None
        values = value if arrived and isinstance(value, list) else []
        lines = [
            _line(run_id, values[n] if n < len(values) else None, arrived)
            for n, run_id in enumerate(chunk.run_ids)
        ]
        for _ in lines:
            self.on_done()
        return lines


def _line(run_id: str, value: Any, arrived: bool) -> dict[str, Any]:
    if not arrived:
        return error_line(run_id, RunError.TIMED_OUT)
    if isinstance(value, dict) and value.get("run_id") == run_id:
        return value
    # An exception object (the task raised after all) or a foreign value: never printed.
    return error_line(run_id, RunError.PROJECTION_FAILED)


def reproject(
    run_ids: Iterable[str],
    *,
    celery_app: Celery = app,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    chunk_timeout_s: float = DEFAULT_CHUNK_TIMEOUT_S,
    queue: str | None = None,
    on_done: Callable[[], None] = lambda: None,
) -> Iterator[dict[str, Any]]:
    """Reprocesses runs through ``project_runs`` and yields one line per run, in the order
    given (each line is what ``project_run`` gives for the run).

    At most ``max_in_flight`` chunks of ``chunk_size`` runs are out at once; every wait is
    bounded by ``chunk_timeout_s``, after which a missing chunk's lines are ``TIMED_OUT``.
    ``on_done`` is called once per run as its chunk's result arrives (for a progress bar).

    Raises:
        ReprojectError: the broker or the result backend failed.
    """
    if chunk_size < 1 or max_in_flight < 1:
        raise ValueError("chunk_size and max_in_flight must be >= 1")
    batch = _Batch(celery_app, chunk_timeout_s, queue, on_done)
    in_flight: deque[_Chunk] = deque()
    for run_chunk in _chunks(run_ids, chunk_size):
        if len(in_flight) >= max_in_flight:
            yield from batch.collect(in_flight.popleft())
        in_flight.append(batch.send(run_chunk))
    while in_flight:
        yield from batch.collect(in_flight.popleft())
