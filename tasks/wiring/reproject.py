"""Batch reprocessing of many runs: ``reproject`` sends them to the workers as chunks of
``project_runs`` tasks (``tasks.worker.runs``), by name, and yields one line per run as each
chunk's one result comes back. The CLI's ``reproject`` command and the bench use it.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError

from boundary import BoundaryError, ErrorCode, EvidenceStatus
from tasks.views import RunError, error_line
from tasks.wiring.app import PROJECT_RUNS, app

#: Runs per ``project_runs`` task: its reads are two pipelines, its result one message.
DEFAULT_CHUNK_SIZE = 100
#: Chunks sent but not yet collected: enough to keep a worker's pool busy while the client
#: reads results, few enough to bound the tasks waiting in the broker.
DEFAULT_MAX_IN_FLIGHT = 8
#: Seconds to wait for one chunk's result before its runs count as timed out.
DEFAULT_CHUNK_TIMEOUT_S = 300.0


class ReprojectError(BoundaryError):
    """The broker or the result backend failed while runs were reprocessed.

    Attributes:
        part: ``"broker"`` or ``"result backend"``.
    """

    code = ErrorCode.DISPATCH_FAILED

    def __init__(self, part: str) -> None:
        super().__init__()
        self.part = part


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
        #: Chunks collected: their result may still come in on the results channel. Every one
        #: is kept (an id a chunk: a million records in chunks of 100 runs are 1,000 ids), so a
        #: message however late is dropped at the next collection.
        self.collected: set[str] = set()

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
        self._drop_late_results(result.id)
        values = _values(value) if arrived else []
        lines = [
            _line(run_id, values[n] if n < len(values) else None, arrived)
            for n, run_id in enumerate(chunk.run_ids)
        ]
        for _ in lines:
            self.on_done()
        return lines

    def _drop_late_results(self, task_id: str) -> None:
        """Celery keeps a result message that comes in for a task nobody waits on (up to
        8,192 of them, in case a waiter comes later): a chunk read from its key before its
        message arrived leaves its lines there, and a long batch would hold thousands of
        chunks. Collected chunks have no later waiter: their messages are dropped."""
        self.collected.add(task_id)
        buffered = getattr(self.app.backend, "_pending_messages", None)
        if not isinstance(buffered, dict) or not buffered:
            return
        for done in self.collected & buffered.keys():
            buffered.pop(done, None)


def _values(value: Any) -> list[Any]:
    """A chunk's lines: ``project_runs`` answers their JSON text (a worker of an older
    version, the list itself); anything else holds none."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return value if isinstance(value, list) else []


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
