"""The worker's start-up check reads persistence from ``INFO`` alone (managed services refuse
``CONFIG``): an RDB snapshot counts once the server wrote one since it started; until then
a server with snapshots off or not yet made reads as not persistent."""

from __future__ import annotations

from boundary.store.redis_facts import server_facts
from tests.tls.servers import TlsRedisServer


def test_rdb_counts_once_a_snapshot_was_written_and_no_config_is_sent(
    tls_redis: TlsRedisServer,
) -> None:
    admin = tls_redis.client()
    admin.config_resetstat()
    worker = tls_redis.role_client("worker")
    before = server_facts(worker)
    assert not before.rdb and not before.aof and not before.persistent
    admin.save()
    after = server_facts(worker)
    assert after.rdb and after.persistent
    # (the worker's user cannot run CONFIG: it was never tried, nor refused)
    stats = admin.info("commandstats")
    assert not [
        name for name in stats if name.startswith("cmdstat_config|") and "resetstat" not in name
    ]
    assert not [e for e in admin.acl_log(200) if e.get("username") == "tb-worker"]
