"""A batch of runs' progress read from Redis in two round trips whatever the number of runs:
one pipeline of their progress and pending sets, then one of their records (no raw
response), one ``read_records.lua`` per run, its keys in KEYS (they share the run's hash tag),
so a record costs no command of its own to send. On a cluster client the pipelines are split
by slot.

``progress_many`` decodes each record (``ProgressEntry``); ``progress_rows_many`` leaves the
fields as read (``ProgressRow``), for a batch of runs' facts built without a model per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from typing import Any

import redis

from boundary.store import keys
from boundary.store._redis_common import RedisClient
from boundary.store._redis_common import translated as _translated
from boundary.store.base import ProgressEntry, ProgressRow
from boundary.store.codec import (
    PROGRESS_FIELDS,
    in_flight_ids,
    in_flight_keys,
    progress_entries,
    progress_member,
    progress_row_member,
    progress_rows,
    with_in_flight,
)

#: A run's records to read: each one's identity and record key.
_Reads = list[tuple[str, str]]


class RedisProgress:
    """The progress reads of ``RedisCanonicalStore`` (a mixin, over its ``client`` and its
    registered ``read_records.lua``)."""

    client: RedisClient
    _read_records: Any  # the registered read_records.lua (redis.commands.core.Script)

    def progress(self, run_id: str) -> list[ProgressEntry]:
        return self.progress_many([run_id])[run_id]

    def progress_many(self, run_ids: Sequence[str]) -> dict[str, list[ProgressEntry]]:
        """Each run's entries, its records decoded (two round trips for them all)."""
        sets = self._progress_sets(run_ids)
        parsed = {
            run_id: [progress_member(member, score) for member, score in members]
            for run_id, (members, _) in sets.items()
        }
        in_flight = {
            run_id: in_flight_keys(pending, parsed[run_id], run_id)
            for run_id, (_, pending) in sets.items()
        }
        # Only a run's own records are read: another run's identity is excluded unread.
        own = [
            [
                (key.identity, keys.record_key(key))
                for key in [k for k, _, _ in entries if k is not None and k.run_id == run_id]
                + in_flight[run_id]
            ]
            for run_id, entries in parsed.items()
        ]
        found = self._read_fields([reads for reads in own if reads])
        return {
            run_id: with_in_flight(progress_entries(entries, found), in_flight[run_id], found)
            for run_id, entries in parsed.items()
        }

    def progress_rows_many(self, run_ids: Sequence[str]) -> dict[str, list[ProgressRow]]:
        """``progress_many`` as rows: the same reads, the same members and records, in the
        same order, with each record's fields left as read and no model built."""
        sets = self._progress_sets(run_ids)
        parsed = {
            run_id: [progress_row_member(member, score) for member, score in members]
            for run_id, (members, _) in sets.items()
        }
        in_flight = {
            run_id: in_flight_ids(pending, parsed[run_id], run_id)
            for run_id, (_, pending) in sets.items()
        }
        own = [
            [
                (f"{run_id}:{tool_call_id}", keys.record_key_of(run_id, tool_call_id))
                for tool_call_id in [t for r, t, _, _ in members if r == run_id and t is not None]
                + in_flight[run_id]
            ]
            for run_id, members in parsed.items()
        ]
        found = self._read_fields([reads for reads in own if reads])
        return {
            run_id: progress_rows(members, found, run_id, in_flight[run_id])
            for run_id, members in parsed.items()
        }

    def _progress_sets(
        self, run_ids: Sequence[str]
    ) -> dict[str, tuple[list[tuple[str, float]], list[str]]]:
        """Each run's progress set (members with scores) and pending set, in one pipeline."""
        unique = list(dict.fromkeys(run_ids))
        with _translated():
            pipe = self.client.pipeline(transaction=False)
            for run_id in unique:
                pipe.zrange(keys.progress_key(run_id), 0, -1, withscores=True)
                # Calls still running are in the pending set only: counted as projecting.
                pipe.zrange(keys.pending_key(run_id), 0, -1)
            replies: list[Any] = pipe.execute()
        return {
            run_id: (members, pending)
            for run_id, members, pending in zip(unique, replies[::2], replies[1::2], strict=True)
        }

    def _read_fields(self, runs: list[_Reads]) -> dict[str, dict[str, str]]:
        """``PROGRESS_FIELDS`` of each record of ``runs`` (each a run's reads), by identity,
        empty fields left out: one pipeline of ``read_records.lua`` (by its SHA; loaded and
        sent again once if the server does not hold it)."""
        if not runs:
            return {}
        script = self._read_records
        with _translated():
            for attempt in (1, 2):
                pipe = self.client.pipeline(transaction=False)
                for reads in runs:
                    record_keys = [record_key for _, record_key in reads]
                    # The script holds the field names: only the keys are sent.
                    pipe.evalsha(script.sha, len(record_keys), *record_keys)
                replies: list[Any] = pipe.execute(raise_on_error=False)
                lost = any(isinstance(r, redis.exceptions.NoScriptError) for r in replies)
                if lost and attempt == 1:
                    self.client.script_load(script.script)
                    continue
                break
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return {
            # The non-empty fields (a value is a string or None), with no Python loop per field.
            identity: dict(compress(zip(PROGRESS_FIELDS, values, strict=True), values))
            for reads, run_values in zip(runs, replies, strict=True)
            for (identity, _), values in zip(reads, run_values, strict=True)
        }
