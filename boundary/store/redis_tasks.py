"""MCP task ids mapped to canonical records: an unguessable id per task, bound to the
requester that created it, and an index per requester for ``tasks/list`` (never a SCAN).

The record stays the one truth about the call; an entry here only says which call a task id
names, whose it is, and how long the task is kept.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import cast

from boundary.models import CanonicalKey
from boundary.store import keys
from boundary.store._redis_common import RedisClient
from boundary.store._redis_common import translated as _translated
from boundary.store.base import CanonicalStore

#: Bytes of randomness in a task id (192 bits, URL-safe base64).
TASK_ID_BYTES = 24


def new_task_id() -> str:
    """A cryptographically random task id."""
    return secrets.token_urlsafe(TASK_ID_BYTES)


@dataclass(frozen=True, slots=True)
class TaskEntry:
    """What a task id names: the call, its owner, when the task was created and how long it
    is kept (both epoch/duration milliseconds, fixed at creation)."""

    task_id: str
    key: CanonicalKey
    owner: str
    created_ms: int
    ttl_ms: int


def _member(entry: TaskEntry) -> str:
    return f"{entry.created_ms:013d}:{entry.task_id}"


class RedisTaskIndex:
    """Task entries and the per-owner index, on the store's Redis.

    Raises (every method):
        StoreError: the store cannot be read or written.
    """

    def __init__(self, client: RedisClient) -> None:
        self.client = client

    @classmethod
    def of(cls, store: CanonicalStore) -> RedisTaskIndex | None:
        """The index on ``store``'s Redis, or ``None`` for a store that is not Redis."""
        client = getattr(store, "client", None)
        return cls(client) if client is not None else None

    def add(self, entry: TaskEntry) -> None:
        """Records the entry, expiring at creation + ttl, and indexes it under its owner."""
        expires_ms = entry.created_ms + entry.ttl_ms
        index = keys.mcp_tasks_key(entry.owner)
        with _translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(
                keys.mcp_task_key(entry.task_id),
                mapping={
                    "identity": entry.key.identity,
                    "owner": entry.owner,
                    "created_ms": entry.created_ms,
                    "ttl_ms": entry.ttl_ms,
                },
            )
            pipe.pexpireat(keys.mcp_task_key(entry.task_id), expires_ms)
            pipe.zadd(index, {_member(entry): 0})
            # The index lives as long as its longest-lived task.
            pipe.pexpireat(index, expires_ms, gt=True)
            pipe.pexpireat(index, expires_ms, nx=True)
            pipe.execute()

    def get(self, task_id: str) -> TaskEntry | None:
        """The entry, ``None`` when unknown or expired."""
        with _translated():
            fields = cast("dict[str, str]", self.client.hgetall(keys.mcp_task_key(task_id)))
        if not fields:
            return None
        try:
            return TaskEntry(
                task_id=task_id,
                key=CanonicalKey.from_identity(fields["identity"]),
                owner=fields["owner"],
                created_ms=int(fields["created_ms"]),
                ttl_ms=int(fields["ttl_ms"]),
            )
        except (KeyError, ValueError):
            return None

    def page(self, owner: str, after: str | None, limit: int) -> tuple[list[TaskEntry], str | None]:
        """Up to ``limit`` of the owner's live tasks, newest first, after the member ``after``
        (the cursor a previous page returned); and the next cursor, ``None`` on the last page.
        Members whose task expired are dropped from the index on the way."""
        index = keys.mcp_tasks_key(owner)
        upper = f"({after}" if after else "+"
        with _translated():
            members = cast(
                "list[str]", self.client.zrevrangebylex(index, upper, "-", start=0, num=limit + 1)
            )
        more = len(members) > limit
        members = members[:limit]
        entries: list[TaskEntry] = []
        gone: list[str] = []
        for member in members:
            entry = self.get(member.partition(":")[2])
            if entry is None or entry.owner != owner:
                gone.append(member)
            else:
                entries.append(entry)
        if gone:
            with _translated():
                self.client.zrem(index, *gone)
        next_cursor = members[-1] if more and members else None
        return entries, next_cursor
