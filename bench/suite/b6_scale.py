"""B6 at scale: a store holding many sealed records (1,000,000 in the full run).

What a record costs the server (``INFO memory`` before and after, per record, run keys
included; ``MEMORY USAGE`` and the encoding of a sample record), and what the two
operations that list runs cost at that size: the reaper's search for due calls
(``store.due_pending``, with a few PROJECTING calls among the sealed ones: it reads the
pending-runs index) and the ``runs`` command's listing (``store.run_ids``: the runs index on a
single Redis, SCAN on a cluster or before the index existed; and a summary per run).

Memory depends on the server's ``hash-max-listpack-value``: with Redis's default (64) any
field over 64 bytes (the request, the raw response or the agent result) makes the record a
hashtable; a record under the setting stays a compact listpack. The figures say which
setting the server had.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from bench.suite.fixtures import write_pending, write_sealed
from boundary import CanonicalKey, RedisCanonicalStore
from boundary.store import keys as store_keys

#: Calls per run of the written runs (as in B5).
CALLS_PER_RUN = 10
#: PROJECTING calls the reaper has to find among the sealed ones (in runs of their own).
PENDING_CALLS = 100


def keys_of_runs(prefix: str, runs: int) -> Iterator[CanonicalKey]:
    for n in range(runs):
        for call in range(CALLS_PER_RUN):
            yield CanonicalKey(run_id=f"{prefix}-{n}", tool_call_id=f"call_{call}")


def _used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def listpack_value(client: redis.Redis) -> int | None:
    try:
        got = client.config_get("hash-max-listpack-value")
    except redis.ResponseError:  # CONFIG may be renamed or refused on a managed server
        return None
    value = got.get("hash-max-listpack-value")
    return None if value is None else int(value)


def _timed(action: Any) -> tuple[float, Any]:
    began = time.perf_counter()
    value = action()
    return time.perf_counter() - began, value


def scale(store: RedisCanonicalStore, records: int) -> dict[str, Any]:
    """Writes ``records`` sealed calls (and ``PENDING_CALLS`` PROJECTING ones), measures,
    and leaves them for the caller to flush."""
    client = store.client
    runs = max(records // CALLS_PER_RUN, 1)
    before = _used_memory(client)
    write_s, written = _timed(lambda: write_sealed(store, keys_of_runs("b6s-run", runs)))
    sealed_bytes = _used_memory(client) - before
    overdue = datetime.now(UTC) - timedelta(seconds=1)
    pending_runs = max(PENDING_CALLS // CALLS_PER_RUN, 1)
    write_pending(store, keys_of_runs("b6s-stuck", pending_runs), deadline=overdue)
    sample = CanonicalKey(run_id="b6s-run-0", tool_call_id="call_0")
    sample_key = store_keys.record_key(sample)
    # What the reaper's first pass reads (runs sealed since the last pass stay in it unless
    # their last seal dropped them), and what the runs listing reads (0: it SCANs).
    pending_runs_indexed = int(client.zcard(store_keys.PENDING_RUNS))
    runs_indexed = int(client.zcard(store_keys.RUNS))
    reaper_s, due = _timed(lambda: store.due_pending(datetime.now(UTC), limit=1000))
    # Once more: what a pass costs when the one before has tidied up (the pending-runs index
    # drops a run whose calls are all sealed when a pass finds it so).
    reaper_again_s, due_again = _timed(lambda: store.due_pending(datetime.now(UTC), limit=1000))
    run_ids_s, run_ids = _timed(lambda: sorted(store.run_ids()))
    # The same listing by SCAN (a cluster's way, and this one's before the runs index), in
    # the same run: the ratio holds on a loaded machine where the seconds do not.
    scan_s, scanned = _timed(lambda: sorted(store.scanned_run_ids()))
    # The runs command's summaries of every run (pipelined, ``store.run_summaries``).
    summaries_s, summaries = _timed(lambda: store.run_summaries(run_ids))
    return {
        "records": written,
        "runs": runs,
        "write_s": write_s,
        "records_written_per_s": written / write_s,
        "hash_max_listpack_value": listpack_value(client),
        "used_memory_bytes": sealed_bytes,
        "bytes_per_record": sealed_bytes / written,
        "sample_record_bytes": int(client.memory_usage(sample_key, samples=0) or 0),
        "sample_record_encoding": client.object("encoding", sample_key),
        "keys": int(client.dbsize()),
        "pending_calls": pending_runs * CALLS_PER_RUN,
        "pending_runs_indexed": pending_runs_indexed,
        "runs_indexed": runs_indexed,
        "reaper_s": reaper_s,
        "reaper_found": len(due),
        "reaper_again_s": reaper_again_s,
        "reaper_again_found": len(due_again),
        "run_ids_s": run_ids_s,
        "run_ids_found": len(run_ids),
        "scan_run_ids_s": scan_s,
        "scan_run_ids_found": len(scanned),
        "summaries_s": summaries_s,
        "summaries_found": len(summaries),
        "summaries_per_run_ms": summaries_s * 1000 / max(len(run_ids), 1),
        "runs_command_s": run_ids_s + summaries_s,
    }
