"""Re-projection jobs in Redis: a small hash per job (its selection, state, each lane's
cursor and the totals), a stream of its report lines, and an index of jobs. What a job keeps
(its hash and lines, as Redis's ``MEMORY USAGE`` counts them) is bounded in bytes.
Every change is one Lua script, so a chunk's cursor, totals and lines move together. A job
and its lines expire ``ttl_s`` after its last checkpoint; ``delete`` removes a finished one."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from boundary.models import SAFE_ID
from boundary.store import keys
from boundary.store._redis_common import RedisClient, load_script, script, translated
from boundary.store.base import CanonicalStore

_START = load_script("jobs/start")
_CHECKPOINT = load_script("jobs/checkpoint")
_CANCEL = load_script("jobs/cancel")
_SLOT = load_script("jobs/slot")
_TAKEN = load_script("jobs/taken")
_DELETE = load_script("jobs/delete")

#: A job's hash and lines live this long after its last checkpoint (a day; the setting
#: ``TOOL_BOUNDARY_JOB_REPORT_TTL_S``).
DEFAULT_JOB_TTL_S = 24 * 3600
#: Bytes a job keeps in Redis, its hash and report lines with their overhead as ``MEMORY
#: USAGE`` counts them (the oldest lines go first; a follower reads them as they come; the
#: setting ``TOOL_BOUNDARY_JOB_REPORT_MAX_BYTES``).
DEFAULT_MAX_BYTES = 8 * 1024 * 1024

#: A job's states.
RUNNING, DONE, CANCELLED, FAILED = "running", "done", "cancelled", "failed"


class Checkpoint:
    """What ``job_checkpoint.lua`` answered."""

    GOES_ON = 1
    ENDED = 2
    #: The lane ended, and with it the job (once a job).
    FINISHED = 3
    NOT_MINE = 0
    NO_JOB = -1
    LANE_ENDED = -2


@dataclass(frozen=True)
class Job:
    """A job as its hash holds it (no report lines)."""

    job_id: str
    spec: dict[str, Any]
    state: str
    cancel: bool
    lanes: int
    lanes_ended: int
    cursors: dict[int, str]
    ended: frozenset[int]
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None
    chunks: int
    totals: dict[str, int] = field(default_factory=dict)
    #: A worker has started a chunk of it (a job never taken is cancelled at once).
    taken: bool = False
    #: Bytes the job kept in Redis after its last lines (hash and lines, as ``MEMORY USAGE``
    #: counts them), and lines dropped past the byte bound.
    report_bytes: int = 0
    lines_trimmed: int = 0

    @property
    def active(self) -> bool:
        return self.state == RUNNING

    def as_dict(self) -> dict[str, Any]:
        """The job as ``jobs show --json`` prints it: ids, counts and times, nothing raw."""
        return {
            "job_id": self.job_id,
            "state": "cancelling" if self.active and self.cancel else self.state,
            "spec": self.spec,
            "lanes": self.lanes,
            "lanes_ended": self.lanes_ended,
            "chunks": self.chunks,
            "created_at_ms": self.created_at_ms,
            "updated_at_ms": self.updated_at_ms,
            "finished_at_ms": self.finished_at_ms,
            "totals": dict(sorted(self.totals.items())),
            "taken": self.taken,
            "report_bytes": self.report_bytes,
            "lines_trimmed": self.lines_trimmed,
        }


def _job(fields: Mapping[str, str]) -> Job:
    lanes = int(fields.get("lanes", 0))
    return Job(
        job_id=fields.get("id", ""),
        spec=json.loads(fields.get("spec") or "{}"),
        state=fields.get("state", ""),
        cancel=fields.get("cancel") == "1",
        lanes=lanes,
        lanes_ended=int(fields.get("lanes_ended", 0)),
        cursors={n: fields.get(f"lane:{n}", "") for n in range(lanes)},
        ended=frozenset(n for n in range(lanes) if f"lane:{n}:ended" in fields),
        created_at_ms=int(fields.get("created_at", 0)),
        updated_at_ms=int(fields.get("updated_at", 0)),
        finished_at_ms=int(fields["finished_at"]) if fields.get("finished_at") else None,
        chunks=int(fields.get("chunks", 0)),
        totals={name[2:]: int(value) for name, value in fields.items() if name.startswith("t:")},
        taken=fields.get("taken") == "1",
        report_bytes=int(fields.get("report_bytes", 0)),
        lines_trimmed=int(fields.get("lines_trimmed", 0)),
    )


class RedisJobs:
    """Jobs' hashes, lines and index on one Redis (they share one hash tag)."""

    def __init__(
        self,
        client: RedisClient,
        *,
        ttl_s: float = DEFAULT_JOB_TTL_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._client = client
        self.ttl_ms = int(ttl_s * 1000)
        self.max_bytes = max_bytes
        self._start = script(client, _START)
        self._checkpoint = script(client, _CHECKPOINT)
        self._cancel = script(client, _CANCEL)
        self._slot = script(client, _SLOT)
        self._taken = script(client, _TAKEN)
        self._delete = script(client, _DELETE)

    @classmethod
    def of(
        cls,
        store: CanonicalStore,
        *,
        ttl_s: float = DEFAULT_JOB_TTL_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> RedisJobs | None:
        client = getattr(store, "client", None)
        return cls(client, ttl_s=ttl_s, max_bytes=max_bytes) if client is not None else None

    def start(self, job_id: str, spec: dict[str, Any], lanes: int, cursor: str) -> tuple[bool, Job]:
        """Creates the job, or finds the one with this id: ``(created, job)``."""
        if SAFE_ID.fullmatch(job_id) is None:
            raise ValueError("job id is not a safe identifier")
        argv: list[str | int] = [
            job_id,
            json.dumps(spec, sort_keys=True),
            lanes,
            self.ttl_ms,
            cursor,
        ]
        with translated():
            created, _ = self._start(keys=[keys.job_key(job_id), keys.JOBS], args=argv)
        job = self.get(job_id)
        assert job is not None  # written by the script just now (or before)
        return int(created) == 1, job

    def get(self, job_id: str) -> Job | None:
        if SAFE_ID.fullmatch(job_id) is None:
            return None
        with translated():
            fields: dict[str, str] = self._client.hgetall(keys.job_key(job_id))  # type: ignore[assignment]
        return _job(fields) if fields else None

    def recent(self, limit: int = 100) -> list[Job]:
        """The newest ``limit`` jobs, newest first (the index, then one pipeline)."""
        with translated():
            ids: list[str] = self._client.zrange(keys.JOBS, 0, limit - 1, desc=True)  # type: ignore[assignment]
            pipe = self._client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hgetall(keys.job_key(job_id))
            replies = pipe.execute()
        return [_job(fields) for fields in replies if fields]

    def checkpoint(
        self,
        job_id: str,
        lane: int,
        *,
        before: str,
        after: str,
        totals: Mapping[str, int],
        lines: Sequence[str],
        stop: bool = False,
        failed: bool = False,
    ) -> int:
        """Moves ``lane`` from cursor ``before`` to ``after`` ("" = the lane is done), adding
        ``totals`` and ``lines``, in one script: a ``Checkpoint`` code."""
        ending = "2" if failed else "1" if stop else "0"
        argv: list[Any] = [lane, before, after, ending, self.ttl_ms, self.max_bytes]
        argv.append(len(totals))
        for name, value in totals.items():
            argv += [name, value]
        argv += list(lines)
        with translated():
            reply = self._checkpoint(
                keys=[keys.job_key(job_id), keys.job_lines_key(job_id)], args=argv
            )
        return int(reply)

    def cancel(self, job_id: str) -> str | None:
        """Asks the job to stop: its state before (``None``: no such job)."""
        if SAFE_ID.fullmatch(job_id) is None:
            return None
        with translated():
            state = self._cancel(keys=[keys.job_key(job_id)], args=[])
        return str(state) or None

    def mark_taken(self, job_id: str) -> bool:
        """Notes that a worker started a chunk of the job (False: no such job)."""
        with translated():
            return int(self._taken(keys=[keys.job_key(job_id)], args=[])) == 1

    def delete(self, job_id: str) -> str | None:
        """Removes a job that is not running and all it kept (hash, lines, index entry): its
        state before; ``"running"`` (left as it is) or ``None`` (no such job)."""
        if SAFE_ID.fullmatch(job_id) is None:
            return None
        job_keys = [keys.job_key(job_id), keys.job_lines_key(job_id), keys.JOBS]
        with translated():
            state = self._delete(keys=job_keys, args=[job_id])
        return str(state) or None

    def next_slot(self, job_id: str, lane: int) -> int:
        """The lane's next fencing token for its hold on a re-projection slot (counts up
        from 1); 0 when the job is gone."""
        with translated():
            return int(self._slot(keys=[keys.job_key(job_id)], args=[lane]))

    def lines(
        self, job_id: str, after: str = "0", count: int = 1000, block_ms: int | None = None
    ) -> list[tuple[str, str]]:
        """Report lines after stream id ``after``: ``(id, line)`` pairs, oldest first."""
        with translated():
            reply: Any = self._client.xread(
                {keys.job_lines_key(job_id): after}, count=count, block=block_ms
            )
        if not reply:
            return []
        entries = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
        return [(entry_id, values.get("l", "")) for entry_id, values in entries]

    def first_line_id(self, job_id: str) -> str | None:
        """The id of the oldest line kept (``None``: none), to tell lines trimmed away."""
        with translated():
            first: Any = self._client.xrange(keys.job_lines_key(job_id), count=1)
        return first[0][0] if first else None
