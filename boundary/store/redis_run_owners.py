"""Who an opened run belongs to, for a door that tells requesters apart (the MCP server with
OAuth tokens): the first requester that uses an open run owns it, and any other requester is
told the run does not exist.

The owner is one more field of the run's hash (``keys.run_key``), written by one script, so
it expires and closes with the run and two first uses cannot both win.
"""

from __future__ import annotations

from enum import IntEnum

from boundary.models import SAFE_ID
from boundary.store import keys
from boundary.store._redis_common import RedisClient, record_script, script, translated
from boundary.store.base import CanonicalStore
from boundary.store.codes import ScriptCode

_OWN_RUN = record_script("own_run")


class RunOwnership(IntEnum):
    """``own_run.lua``'s answer."""

    OWNED_NOW = 1
    ALREADY_OWNED = 0
    NOT_OPEN = -1
    OTHER_OWNER = -2

    @property
    def allowed(self) -> bool:
        """True when the requester may use the run."""
        return self in (RunOwnership.OWNED_NOW, RunOwnership.ALREADY_OWNED)


_OWN_CODES = {
    ScriptCode.OK: RunOwnership.OWNED_NOW,
    ScriptCode.UNCHANGED: RunOwnership.ALREADY_OWNED,
    ScriptCode.CLOSED: RunOwnership.NOT_OPEN,
    ScriptCode.CONFLICT: RunOwnership.OTHER_OWNER,
}


class RedisRunOwners:
    """Run owners on the store's Redis.

    Raises (every method):
        StoreError: the store cannot be read or written.
    """

    def __init__(self, client: RedisClient) -> None:
        self._own = script(client, _OWN_RUN)

    @classmethod
    def of(cls, store: CanonicalStore) -> RedisRunOwners | None:
        """The owners on ``store``'s Redis, or ``None`` for a store that is not Redis."""
        client = getattr(store, "client", None)
        return cls(client) if client is not None else None

    def own(self, run_id: str, owner: str) -> RunOwnership:
        """Binds the open run to ``owner`` unless it has an owner already; says which."""
        if SAFE_ID.fullmatch(run_id) is None:
            return RunOwnership.NOT_OPEN
        with translated():
            code = int(self._own(keys=[keys.run_key(run_id)], args=[owner]))
        return _OWN_CODES[ScriptCode(code)]
