"""B6: Redis memory of one sealed record (``MEMORY USAGE``) against the UTF-8 bytes of its
payload (request + raw response + agent result), for a few raw sizes; and the run keys'
share per call of a 10-call run."""

from __future__ import annotations

from typing import Any

from bench.suite.b6_scale import listpack_value
from bench.suite.fixtures import write_sealed
from boundary import CanonicalKey, RedisCanonicalStore, utf8_size
from boundary.store import keys as store_keys

#: Calls of the run whose run keys (budget, progress) are measured.
RUN_CALLS = 10


def _memory(store: RedisCanonicalStore, key: str) -> int:
    # SAMPLES 0: every field, not an estimate from a sample.
    return int(store.client.memory_usage(key, samples=0) or 0)


def memory(store: RedisCanonicalStore, raw_sizes: tuple[int, ...]) -> dict[str, Any]:
    records = []
    for size in raw_sizes:
        key = CanonicalKey(run_id=f"b6-{size}", tool_call_id="call_0")
        write_sealed(store, [key], raw_bytes=size)
        record = store.get(key)
        assert record is not None
        payload = sum(
            utf8_size(text)
            for text in (record.request, record.raw or "", record.agent_result)
            if text
        )
        used = _memory(store, store_keys.record_key(key))
        records.append(
            {
                "raw_bytes": utf8_size(record.raw or ""),
                "payload_bytes": payload,
                "memory_bytes": used,
                "overhead_bytes": used - payload,
                "memory_over_payload": used / payload,
                "encoding": store.client.object("encoding", store_keys.record_key(key)),
            }
        )
    run_id = "b6-run"
    write_sealed(
        store, [CanonicalKey(run_id=run_id, tool_call_id=f"call_{n}") for n in range(RUN_CALLS)]
    )
    run_keys = sum(
        _memory(store, name)
        for name in (store_keys.budget_key(run_id), store_keys.progress_key(run_id))
    )
    return {
        "records": records,
        "run_keys_bytes_per_call": run_keys / RUN_CALLS,
        "hash_max_listpack_value": listpack_value(store.client),
    }
