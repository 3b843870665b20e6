"""Batch reprocessing of many runs: ``reproject`` sends them to the workers as chunks of
``project_runs`` tasks (``tasks.worker.runs``), by name, and yields one line per run as each
chunk's one result comes back. The CLI's ``reproject`` command and the bench use it.

A chunk's result is read from its key in the result backend (``get_task_meta``, Celery's
public API), with short pauses until it is there, and the client keeps no subscription to
any chunk's result: Celery's Redis backend subscribes to the result of every task it sends
(``on_task_call``), and the client withdraws that subscription as soon as the chunk is out
(``remove_pending_result``). Held to the chunk's end, it would bring every chunk's lines a
second time, as a message on a connection nobody reads (Redis buffers it, up to its pub/sub
clients' output limit, then drops the connection) or, for a client that waits on other
results, into Celery's buffer for a later waiter (up to 8,192 messages). Nothing is kept per
chunk once the chunk is collected.
"""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, states

from boundary import BoundaryError, ErrorCode, EvidenceStatus
from tasks.views import RunError, error_line, in_lists
from tasks.wiring.app import PROJECT_RUNS, app

#: Runs per ``project_runs`` task: its reads are two pipelines, its result one message.
DEFAULT_CHUNK_SIZE = 100
#: Chunks sent but not yet collected: enough to keep a worker's pool busy while the client
#: reads results, few enough to bound the tasks waiting in the broker.
DEFAULT_MAX_IN_FLIGHT = 8
#: Seconds to wait for one chunk's result before its runs count as timed out.
DEFAULT_CHUNK_TIMEOUT_S = 300.0
#: First and longest pause between two reads of a chunk's result key, seconds (the pause
#: doubles): a read is one GET, and the chunks in flight keep the workers busy meanwhile.
POLL_FIRST_S = 0.002
POLL_MAX_S = 0.02


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
    """Sends chunks as ``project_runs`` tasks and reads each chunk's one result from its key
    with a bounded wait (no subscription is kept: nothing is kept for a chunk once collected)."""

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
        except Exception:
            # kombu's errors name the broker URL: none of it goes further.
            raise ReprojectError("broker") from None
        try:
            # Its result is read from its key: no subscription (sent by ``send_task``) stays.
            self.app.backend.remove_pending_result(result)
        except Exception:
            raise ReprojectError("result backend") from None
        return _Chunk(run_ids, result)

    def _meta(self, task_id: str) -> dict[str, Any]:
        """The chunk's result once ready, or what its key holds when the wait ends."""
        backend = self.app.backend
        give_up = time.monotonic() + self.timeout_s
        pause = POLL_FIRST_S
        while True:
            meta: dict[str, Any] = backend.get_task_meta(task_id, cache=False)
            left = give_up - time.monotonic()
            if meta.get("status") in states.READY_STATES or left <= 0:
                return meta
            time.sleep(min(pause, left))
            pause = min(pause * 2, POLL_MAX_S)

    def collect(self, chunk: _Chunk) -> list[dict[str, Any]]:
        task_id = chunk.result.id
        try:
            meta = self._meta(task_id)
            # The lines are ours now: the backend need not keep the chunk until it expires.
            self.app.backend.forget(task_id)
        except Exception:
            raise ReprojectError("result backend") from None
        # A task that failed after all carries an exception: its runs are PROJECTION_FAILED.
        arrived = meta.get("status") in states.READY_STATES
        values = _values(meta.get("result")) if arrived else []
        lines = [
            _line(run_id, values[n] if n < len(values) else None, arrived)
            for n, run_id in enumerate(chunk.run_ids)
        ]
        for _ in lines:
            self.on_done()
        return lines


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
    for run_chunk in in_lists(run_ids, chunk_size):
        if len(in_flight) >= max_in_flight:
            yield from batch.collect(in_flight.popleft())
        in_flight.append(batch.send(run_chunk))
    while in_flight:
        yield from batch.collect(in_flight.popleft())
