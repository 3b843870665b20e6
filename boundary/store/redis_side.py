"""Side projections in Redis: a re-projection's new projection of a call, kept beside its
record by projector version (``keys.side_key``) and expiring with it; and the raw responses a
re-projection reads. The canonical record is never written here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from boundary.models import CanonicalKey, CanonicalRecord
from boundary.store import keys
from boundary.store._redis_common import RedisClient, record_script, script, translated
from boundary.store.base import CanonicalStore, WriteStatus
from boundary.store.codec import WRITE_CODES, exact_ms
from boundary.store.codes import ScriptCode

_SIDE_WRITE = record_script("side_write")

#: The fields of a side projection: what replaces the sealed projection's when facts are read
#: by projector version.
SIDE_FIELDS = (
    "status",
    "evidence_status",
    "agent_result",
    "scope",
    "error_code",
    "projector_version",
)


class RedisSideProjections:
    """Reads raw responses and reads/writes side projections, in pipelines (one round trip
    per batch)."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._write = script(client, _SIDE_WRITE)

    @classmethod
    def of(cls, store: CanonicalStore) -> RedisSideProjections | None:
        """The side projections of a Redis store; ``None`` for another store."""
        client = getattr(store, "client", None)
        return cls(client) if client is not None else None

    def raws(self, call_keys: Sequence[CanonicalKey]) -> list[str | None]:
        """Each call's raw response (``None``: none kept, or the record is gone), in order."""
        if not call_keys:
            return []
        with translated():
            pipe = self._client.pipeline(transaction=False)
            for key in call_keys:
                pipe.hget(keys.record_key(key), "raw")
            return list(pipe.execute())

    def write(self, sides: Sequence[tuple[CanonicalRecord, dict[str, str]]]) -> list[WriteStatus]:
        """Keeps each ``(record, fields)`` as the record's side projection by
        ``fields["projector_version"]``: ``OK``, ``MISSING`` (the record is gone: nothing is
        written) or ``REPLACED`` (another call has its ids now)."""
        if not sides:
            return []
        with translated():
            pipe = self._client.pipeline(transaction=False)
            for record, fields in sides:
                argv: list[Any] = [exact_ms(record.created_at)]
                for name in SIDE_FIELDS:
                    argv += [name, fields.get(name) or ""]
                side = keys.side_key(record.key, fields["projector_version"])
                versions = keys.side_versions_key(record.run_id)
                self._write(
                    keys=[keys.record_key(record.key), side, versions], args=argv, client=pipe
                )
            replies = pipe.execute()
        return [WRITE_CODES[ScriptCode(int(reply))] for reply in replies]

    def read(self, call_keys: Sequence[CanonicalKey], version: str) -> list[dict[str, str]]:
        """Each call's side projection by ``version`` (``{}``: none), in order."""
        if not call_keys:
            return []
        with translated():
            pipe = self._client.pipeline(transaction=False)
            for key in call_keys:
                pipe.hmget(keys.side_key(key, version), SIDE_FIELDS)
            replies = pipe.execute()
        return [
            {name: value for name, value in zip(SIDE_FIELDS, values, strict=True) if value}
            for values in replies
        ]

    def versions(self, run_id: str) -> list[str]:
        """The projector versions the run has side projections of (one SMEMBERS)."""
        with translated():
            found: Any = self._client.smembers(keys.side_versions_key(run_id))
        return sorted(v.decode() if isinstance(v, bytes) else str(v) for v in found)

    def ttls_ms(self, call_keys: Sequence[CanonicalKey], version: str) -> list[int]:
        """Each side projection's PTTL (-2: none), in order: for checks."""
        with translated():
            pipe = self._client.pipeline(transaction=False)
            for key in call_keys:
                pipe.pttl(keys.side_key(key, version))
            return [int(ttl) for ttl in pipe.execute()]


# --- the runs index and run counters, read in pages (a re-projection's selection) ----------


def runs_page(
    client: RedisClient, low_ms: int, skip: int, high_ms: int, most: int
) -> list[tuple[str, float]]:
    """Up to ``most`` members of the runs index scored in ``[low_ms, high_ms]``, after the
    first ``skip`` of them, in score then id order, with their scores (one ZRANGE)."""
    with translated():
        return client.zrange(  # type: ignore[return-value]
            keys.RUNS, low_ms, high_ms, byscore=True, offset=skip, num=most, withscores=True
        )


def runs_count(client: RedisClient, low_ms: int, high_ms: int) -> int:
    """Members of the runs index scored in ``[low_ms, high_ms]`` (one ZCOUNT)."""
    with translated():
        return int(client.zcount(keys.RUNS, low_ms, high_ms))


def run_counters(
    client: RedisClient, run_ids: Sequence[str], fields: Sequence[str]
) -> list[list[str | None]]:
    """Each run's budget counters ``fields`` (``keys.budget_key``), in order (one pipeline)."""
    with translated():
        pipe = client.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hmget(keys.budget_key(run_id), list(fields))
        return list(pipe.execute())
