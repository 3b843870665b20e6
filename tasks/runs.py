"""Run projection as a Celery task, and batch reprocessing of many runs.

``project_run`` resolves a run's progress set through the canonical store and returns its
bounded observed facts; it only reads, so a run can be reprocessed any number of times.
``reproject`` sends many runs as chunked Celery groups and yields one line per run.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from celery import Celery, group
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
from tasks.app import PROJECT_RUN, app
from tasks.calls import _retrying
from tasks.runtime import get_runtime

logger = logging.getLogger(__name__)

#: Runs per Celery group.
DEFAULT_CHUNK_SIZE = 200
#: Groups sent but not yet collected; bounds the tasks waiting in the broker.
DEFAULT_MAX_IN_FLIGHT = 2
#: Seconds to wait for one group's results before its missing runs count as timed out.
DEFAULT_CHUNK_TIMEOUT_S = 300.0
#: Celery's pause after its first read of a group's result keys (its default, 0.5 s, would
#: be added to every chunk).
JOIN_POLL_S = 0.01


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


def observe_run(store: CanonicalStore, run_id: str) -> ObservedFacts:
    """The run's observed facts: what ``ToolBoundary.observe`` returns, for readers that
    have a store but no registry or dispatcher (this task, the CLI)."""
    projector = RunProgressProjector(
        max_facts=store.limits.max_facts, max_facts_bytes=store.limits.max_facts_bytes
    )
    return projector.project(run_id, store.progress(run_id))


def error_line(run_id: str | None, error: RunError) -> dict[str, Any]:
    return {"run_id": run_id, "error": error.value}


@app.task(name=PROJECT_RUN, acks_late=True)
def project_run(run_id: str) -> dict[str, Any]:
    """The run's bounded observed facts as JSON (never raw data), or an error line.

    Reads only: no canonical record, progress set or TTL is changed.
    """
    if not is_safe_id(run_id):
        return error_line(None, RunError.INVALID_RUN_ID)
    try:
        store = get_runtime().store
        facts = _retrying(lambda: observe_run(store, run_id))
    except Exception as exc:
        # Only the type: the text may hold a URL.
        logger.error("project_run %s failed: %s", run_id, type(exc).__name__)
        unavailable = isinstance(exc, StoreError)
        return error_line(
            run_id, RunError.STORE_UNAVAILABLE if unavailable else RunError.PROJECTION_FAILED
        )
    return facts.model_dump(mode="json")


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
    result: Any  # celery.result.GroupResult


class _Batch:
    """Sends chunks as groups and collects each group's results with a bounded wait."""

    def __init__(
        self, celery_app: Celery, timeout_s: float, queue: str | None, on_done: Callable[[], None]
    ) -> None:
        self.app = celery_app
        self.timeout_s = timeout_s
        self.queue = queue
        self.on_done = on_done

    def send(self, run_ids: list[str]) -> _Chunk:
        options = {} if self.queue is None else {"queue": self.queue}
        signatures = [
            self.app.signature(
                PROJECT_RUN,
                args=(run_id,),
                immutable=True,
                argsrepr=repr((run_id,)),
                kwargsrepr="{}",
                **options,
            )
            for run_id in run_ids
        ]
        try:
            result = group(signatures).apply_async()
        except Exception:
            # kombu's errors name the broker URL: none of it goes further.
            raise ReprojectError("broker") from None
        return _Chunk(run_ids, result)

    def collect(self, chunk: _Chunk) -> list[dict[str, Any]]:
        values: dict[str, Any] = {}

        def got(task_id: str, value: Any) -> None:
            values[task_id] = value
            self.on_done()

        ids = [r.id for r in chunk.result.results]
        try:
            try:
                chunk.result.join_native(
                    timeout=self.timeout_s,
                    # Only the first look at the result keys sleeps this long when some
                    # are not ready; later results wake the wait as they are published.
                    interval=JOIN_POLL_S,
                    propagate=False,
                    callback=got,
                    disable_sync_subtasks=False,
                )
            except CeleryTimeoutError:
                # A slow worker or a missed wake-up: read the result keys once more.
                self._read_late(ids, values)
            lines = [
                _line(run_id, values.get(task_id), task_id in values)
                for run_id, task_id in zip(chunk.run_ids, ids, strict=True)
            ]
            self._forget(chunk.result.results, values)
        except Exception:
            raise ReprojectError("result backend") from None
        for _ in range(len(ids) - len(values)):
            self.on_done()
        return lines

    def _forget(self, results: list[Any], arrived: dict[str, Any]) -> None:
        """Deletes the chunk's results: the lines are ours now, and the backend need not
        keep up to ``chunk_size`` bounded fact sets until they expire."""
        backend = self.app.backend
        client = getattr(backend, "client", None)
        if client is None or not hasattr(backend, "get_key_for_task"):
            for result in results:
                result.forget()
            return
        # A key-value backend (Redis): one DEL for the whole chunk instead of one per task.
        client.delete(*(backend.get_key_for_task(r.id) for r in results))
        for result in results:
            if result.id not in arrived:
                # Still subscribed and tracked: stop waiting on it.
                backend.remove_pending_result(result)

    def _read_late(self, ids: list[str], values: dict[str, Any]) -> None:
        missing = [task_id for task_id in ids if task_id not in values]
        try:
            for task_id, meta in self.app.backend.get_many(missing, timeout=0):
                values[task_id] = meta.get("result")
                self.on_done()
        except CeleryTimeoutError:
            pass


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
    """Reprocesses runs through ``project_run`` and yields one line per run, in the order
    given (each line is ``project_run``'s result).

    At most ``max_in_flight`` groups of ``chunk_size`` runs are out at once; every wait is
    bounded by ``chunk_timeout_s``, after which a missing run's line is ``TIMED_OUT``.
    ``on_done`` is called once per run as its result arrives (for a progress bar).

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
