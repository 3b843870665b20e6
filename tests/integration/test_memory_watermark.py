"""The store's memory watermark on a Redis of the test's own: a create is refused
(``StoreFull``, STORE_UNAVAILABLE) as soon as the Redis is past the watermark of its
``maxmemory``, and accepted again as soon as it has room (near the watermark every create
reads ``INFO memory`` again, so neither waits for the once-a-second reading)."""

from __future__ import annotations

from pathlib import Path

import pytest

from boundary import CanonicalKey, ErrorCode, RedisCanonicalStore
from boundary.store.redis_memory import MemoryWatermark, StoreFull, used_fraction
from tests.support.helpers import create_terms
from tests.support.servers import redis_server


def test_the_fullest_node_decides_and_no_maxmemory_is_never_full() -> None:
    replies = {
        "a": {"used_memory": 50, "maxmemory": 100},
        "b": {"used_memory": 95, "maxmemory": 100},
        "c": {"used_memory": 10**9, "maxmemory": 0},
    }
    assert used_fraction(replies) == 0.95
    assert used_fraction({"": {"used_memory": 10**9, "maxmemory": 0}}) is None


def test_creates_are_refused_past_the_watermark_and_accepted_once_there_is_room(
    tmp_path: Path,
) -> None:
    with redis_server(tmp_path / "r", "--maxmemory-policy", "noeviction") as server:
        admin = server.client()
        store = RedisCanonicalStore.from_url(server.url, ttl_s=60)
        # (a reading trusted for a minute: only the near-watermark re-reads can see changes)
        store.memory = MemoryWatermark(0.9, interval_s=60)
        used = int(admin.info("memory")["used_memory"])
        # Given a Redis at 95 % of its maxmemory
        admin.config_set("maxmemory", int(used / 0.95))
        # When a call is created, Then it is refused with a stable, retryable code
        with pytest.raises(StoreFull) as refused:
            store.create(CanonicalKey(run_id="m", tool_call_id="c1"), **create_terms())
        assert store.get(CanonicalKey(run_id="m", tool_call_id="c1")) is None
        assert refused.value.code is ErrorCode.STORE_UNAVAILABLE
        assert ErrorCode.STORE_UNAVAILABLE.retryable
        # And once the Redis has room, the next create is accepted without waiting
        admin.config_set("maxmemory", used * 4)
        assert (
            store.create(CanonicalKey(run_id="m", tool_call_id="c2"), **create_terms()).seq
            is not None
        )
