"""The state of one subscribed seal channel (``seal_wait``): the events of the calls watched on
it, and the seal messages it keeps for calls created while it was subscribed."""

from __future__ import annotations

import threading

#: Seal messages a subscribed channel keeps for calls created while it was subscribed
#: (``SyncSealWatch.cover``), and such calls it remembers: the oldest go first.
RECENT_MAX = 256
#: Characters of the seal messages a channel keeps, at most (the oldest go first).
RECENT_MAX_CHARS = 1 << 20


class Wake(threading.Event):
    """A waiter's event, and the last seal message that set it (``None``: none yet)."""

    def __init__(self) -> None:
        super().__init__()
        self.message: str | None = None


class SealChannel:
    """One subscribed (or subscribing) channel and the events of the calls watched on it."""

    __slots__ = ("confirmed", "covered", "idle_since", "recent", "recent_chars", "users", "waiters")

    def __init__(self) -> None:
        self.confirmed = threading.Event()
        self.waiters: dict[str, set[Wake]] = {}
        self.users = 0
        self.idle_since: float | None = None
        #: Calls created while this subscription was confirmed: tool_call_id -> the
        #: monotonic time it was confirmed by (before the create).
        self.covered: dict[str, float] = {}
        #: The last seal message of each covered call received (tool_call_id -> message).
        self.recent: dict[str, str] = {}
        self.recent_chars = 0

    def keep(self, call: str, message: str) -> None:
        """Keeps a covered call's seal message; the oldest kept go (and their calls are no
        longer covered: a waiter on them reads the record) past the count or size cap."""
        self.drop(call)
        self.recent[call] = message
        self.recent_chars += len(message)
        while len(self.recent) > RECENT_MAX or self.recent_chars > RECENT_MAX_CHARS:
            oldest = next(iter(self.recent))
            self.drop(oldest)
            self.covered.pop(oldest, None)

    def drop(self, call: str) -> None:
        message = self.recent.pop(call, None)
        if message is not None:
            self.recent_chars -= len(message)
