"""What the store's Redis does with memory and restarts (``ServerFacts``), read for the worker's
start-up check: from the one server, or from every primary of a Redis Cluster.

Only ``INFO`` is sent, never ``CONFIG`` (managed services refuse or rename it). ``INFO`` does
not show the ``save`` schedule, so "RDB snapshots" means what it does show: the server wrote
one since it started (``rdb_saves``) or is writing one (``rdb_bgsave_in_progress``). A server
with ``save`` configured that has not snapshotted yet since its start reads as not persistent
(a warning, or a refusal with ``TOOL_BOUNDARY_REQUIRE_PERSISTENCE``); an AOF
(``aof_enabled``) is read exactly."""

from __future__ import annotations

from typing import Any

import redis
import redis.cluster

from boundary.store.base import ServerFacts


def server_facts(client: redis.Redis | redis.cluster.RedisCluster) -> ServerFacts:
    """The server's facts; on a cluster, the worst of its primaries (any evicting node evicts
    the store's keys of its slots; the store is persistent only when every node is).

    Raises:
        redis.RedisError: as the client does (the caller translates it).
    """
    if isinstance(client, redis.cluster.RedisCluster):
        return _cluster_facts(client)
    # INFO, not CONFIG GET: CONFIG is often renamed or refused on managed Redis.
    return _node_facts(client.info("memory"), client.info("persistence"))


def _node_facts(memory: dict[str, Any], persistence: dict[str, Any]) -> ServerFacts:
    return ServerFacts(
        maxmemory_policy=str(memory.get("maxmemory_policy", "noeviction")),
        maxmemory=int(memory.get("maxmemory", 0)),
        aof=bool(int(persistence.get("aof_enabled", 0))),
        rdb=_snapshots(persistence),
    )


def _snapshots(persistence: dict[str, Any]) -> bool:
    """Whether the server writes RDB snapshots, as far as ``INFO persistence`` tells: one was
    written since it started, or one is being written."""
    return (
        int(persistence.get("rdb_saves", 0)) > 0
        or int(persistence.get("rdb_bgsave_in_progress", 0)) > 0
    )


def _per_node(reply: Any, probe: str) -> dict[str, Any]:
    """A cluster reply by node name (redis-py answers a one-node cluster unwrapped)."""
    if not isinstance(reply, dict) or probe in reply:
        return {"": reply if isinstance(reply, dict) else {}}
    return reply


def _cluster_facts(client: redis.cluster.RedisCluster) -> ServerFacts:
    primaries = redis.cluster.RedisCluster.PRIMARIES
    memory = _per_node(client.info("memory", target_nodes=primaries), "used_memory")
    persistence = _per_node(client.info("persistence", target_nodes=primaries), "loading")
    nodes = [_node_facts(memory[node], persistence.get(node, {})) for node in memory]
    evicting = next((node for node in nodes if node.evicts), None)
    return ServerFacts(
        maxmemory_policy=evicting.maxmemory_policy if evicting else "noeviction",
        maxmemory=max((node.maxmemory for node in nodes), default=0),
        aof=all(node.aof for node in nodes),
        # Set when every node keeps its writes one way or the other (``persistent``).
        rdb=all(node.persistent for node in nodes),
    )


def cluster_enabled(url: str, timeout_s: float = 2.0) -> bool:
    """Whether the Redis at ``url`` is a Redis Cluster node (``INFO cluster``), so a store URL
    that names one works without being told. ``False`` when it does not answer (the store's
    own errors then say so) or for a ``redis+sentinel://`` URL."""
    if url.lower().startswith("redis+sentinel://"):
        return False
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
        )
    except ValueError:
        return False
    try:
        return bool(int(client.info("cluster").get("cluster_enabled", 0)))
    except (redis.RedisError, OSError, ValueError):
        return False
    finally:
        client.close()
