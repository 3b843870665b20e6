"""The calls PROJECTING, read from Redis's pending indexes, never the keyspace: the reaper's
due calls and its decision for each, and the counts a metrics scrape reads (a mixin of
``RedisCanonicalStore``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from pydantic import ValidationError

from boundary.models import CanonicalKey, InvocationStatus
from boundary.store import keys
from boundary.store._redis_common import RedisClient, record_script, script, translated
from boundary.store.base import ReapDecision
from boundary.store.codec import ms
from boundary.store.codes import ScriptCode

#: SCAN batch size hint (and the chunk of runs or calls read per pipeline).
SCAN_COUNT = 1000

_REQUEUE = record_script("requeue")
_UNINDEX_RUN = record_script("unindex_run")


def _due_keys(identities: list[str]) -> Iterator[CanonicalKey]:
    """The keys of a pending set's members (a member that is not an identity is skipped)."""
    for identity in identities:
        try:
            yield CanonicalKey.from_identity(identity)
        except ValidationError:
            continue


def _score(score: float) -> str:
    """A sorted-set score as ZSCORE replies it (integral scores without a decimal point)."""
    return str(int(score)) if float(score).is_integer() else repr(score)


class RedisPending:
    """The pending indexes' half of ``RedisCanonicalStore`` (a mixin: the store's own
    ``requeue_due``, ``due_pending``, ``count_projecting`` and ``heartbeat_lag_s``, over its
    ``client``)."""

    client: RedisClient
    _cluster: bool

    def _register_pending_scripts(self) -> None:
        self._requeue = script(self.client, _REQUEUE)
        self._unindex_run = script(self.client, _UNINDEX_RUN)

    def now(self) -> datetime:
        """The store's clock (Redis TIME): ``RedisCanonicalStore.now``."""
        raise NotImplementedError

    def requeue_due(
        self,
        key: CanonicalKey,
        *,
        retry_after_s: float,
        max_reprojections: int,
        due_at: datetime | None = None,
    ) -> ReapDecision:
        run_keys = [keys.record_key(key), keys.pending_key(key.run_id)]
        argv: list[str | int] = [
            key.identity,
            max(int(retry_after_s * 1000), 1),
            max_reprojections,
            "" if due_at is None else ms(due_at),
        ]
        with translated():
            code = int(self._requeue(keys=run_keys, args=argv))
        if code >= 1:
            return ReapDecision.REPROJECT
        if code == ScriptCode.NOT_DUE:
            return ReapDecision.LEFT
        gone = (ScriptCode.MISSING, ScriptCode.NOT_PROJECTING)
        return ReapDecision.GONE if code in gone else ReapDecision.SEAL

    def count_projecting(self) -> int | None:
        """The pending sets' sizes of the runs in the pending-runs index (one ZRANGE and one
        pipeline of ZCARDs, per chunk of runs): its cost follows the runs with calls
        PROJECTING."""
        with translated():
            run_ids: list[str] = self.client.zrange(keys.PENDING_RUNS, 0, -1)  # type: ignore[assignment]
            total = 0
            for start in range(0, len(run_ids), SCAN_COUNT):
                pipe = self.client.pipeline(transaction=False)
                for run_id in run_ids[start : start + SCAN_COUNT]:
                    pipe.zcard(keys.pending_key(run_id))
                total += sum(int(n) for n in pipe.execute())
        return total

    def heartbeat_lag_s(self) -> float | None:
        """Reads the pending-runs index, each indexed run's pending set and three fields of
        each pending record, in pipelines of ``SCAN_COUNT``: its cost follows the calls
        PROJECTING, never the keyspace. Meant for a metrics scrape, not for every call."""
        with translated():
            run_ids: list[str] = self.client.zrange(keys.PENDING_RUNS, 0, -1)  # type: ignore[assignment]
            calls: list[CanonicalKey] = []
            for start in range(0, len(run_ids), SCAN_COUNT):
                pipe = self.client.pipeline(transaction=False)
                for run_id in run_ids[start : start + SCAN_COUNT]:
                    pipe.zrange(keys.pending_key(run_id), 0, -1)
                for members in pipe.execute():
                    calls.extend(_due_keys(members))
            oldest: int | None = None
            for start in range(0, len(calls), SCAN_COUNT):
                pipe = self.client.pipeline(transaction=False)
                for key in calls[start : start + SCAN_COUNT]:
                    pipe.hmget(keys.record_key(key), "status", "started_at", "heartbeat_at")
                for status, started, beat in pipe.execute():
                    if status != InvocationStatus.PROJECTING.value or not started:
                        continue
                    alive = max(int(started), int(beat or 0))
                    oldest = alive if oldest is None else min(oldest, alive)
        if oldest is None:
            return None
        return max(ms(self.now()) - oldest, 0) / 1000

    def due_pending(self, now: datetime | None = None, limit: int = 1000) -> list[CanonicalKey]:
        """Reads the pending-runs index, not the keyspace: its cost follows the runs with
        calls PROJECTING. Runs whose pending set is gone are dropped from the index (unless a
        create touched them meanwhile), one script call per chunk of the index."""
        due: list[CanonicalKey] = []
        if now is None:
            now = self.now()
        with translated():
            indexed: list[tuple[str, float]] = self.client.zrange(  # type: ignore[assignment]
                keys.PENDING_RUNS, 0, -1, withscores=True
            )
            for start in range(0, len(indexed), SCAN_COUNT):
                chunk = indexed[start : start + SCAN_COUNT]
                pipe = self.client.pipeline(transaction=False)
                for run_id, _ in chunk:
                    pipe.zrangebyscore(
                        keys.pending_key(run_id), "-inf", ms(now), start=0, num=limit
                    )
                    pipe.exists(keys.pending_key(run_id))
                replies = pipe.execute()
                gone: list[str] = []
                for n, (run_id, score) in enumerate(chunk):
                    members, exists = replies[2 * n], replies[2 * n + 1]
                    if not exists:
                        gone += [run_id, _score(score)]
                    due.extend(_due_keys(members))
                if gone:
                    self._unindex_run(keys=self._unindex_keys(gone[::2]), args=gone)
                if len(due) >= limit:
                    return due[:limit]
        return due

    def _unindex_keys(self, run_ids: list[str]) -> list[str]:
        """``unindex_run.lua``'s KEYS: the index, and on a single Redis the runs' pending keys
        (the script then checks them itself; on a cluster they are in other hash slots)."""
        if self._cluster:
            return [keys.PENDING_RUNS]
        return [keys.PENDING_RUNS, *(keys.pending_key(run_id) for run_id in run_ids)]
