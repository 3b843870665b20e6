"""The store's side of a call an MCP client made: the key of the one call whose id the server
minted, and its record once sealed."""

from __future__ import annotations

import redis

from boundary import CanonicalKey, CanonicalRecord, InvocationStatus, RedisCanonicalStore
from tests.mcp.conftest import RUN_ID
from tests.support.helpers import wait_until


def minted_key(redis_client: redis.Redis) -> CanonicalKey:
    """The one call of the run whose id the server minted."""
    found = list(redis_client.scan_iter(f"tb:{{{RUN_ID}}}:call:mcp-*"))
    assert len(found) == 1, found
    name = found[0].decode() if isinstance(found[0], bytes) else found[0]
    return CanonicalKey(run_id=RUN_ID, tool_call_id=name.rsplit(":", 1)[1])


def sealed(
    store: RedisCanonicalStore, key: CanonicalKey, timeout_s: float = 30.0
) -> CanonicalRecord:
    """The call's record once it is no longer PROJECTING (fails after ``timeout_s``)."""

    def ended() -> CanonicalRecord | None:
        record = store.get(key)
        if record is not None and record.status is not InvocationStatus.PROJECTING:
            return record
        return None

    record: CanonicalRecord = wait_until(ended, "the call to be sealed", timeout_s, every=0.05)
    return record
