"""The record the execute step hands to the project step of the same call in the same process.

A worker that runs both steps of a call (a threads-pool worker always does; a prefork child
often) would otherwise read back from Redis the record it has just written: one round trip and
one decode per call. The execute step keeps the record as its raw response left it (the
store's write time included, from ``store_raw_into``), and the project step takes it instead
of reading. Its seal names the record's ``created_at``, so if another call with the same ids
was created since (the first one expired), the seal is refused (``WriteStatus.REPLACED``) and
the step reads the record as usual: the record still decides.

Bounded: an entry is taken once, kept at most ``max_age_s``, at most ``max_entries`` of them
(the oldest go first) and only for raw responses up to ``max_raw_chars``; a call whose
project step runs in another process costs a slot until then.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

from boundary.models import CanonicalKey, CanonicalRecord

#: Entries kept at once (each normally lives for the milliseconds between the two steps).
DEFAULT_MAX_ENTRIES = 256
#: Seconds an entry may wait for its project step.
DEFAULT_MAX_AGE_S = 30.0
#: Longest raw response (characters) kept: a larger one is read back from the store.
DEFAULT_MAX_RAW_CHARS = 64 * 1024


class Handover:
    """Records left by execute steps for the project steps of the same calls."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        max_raw_chars: int = DEFAULT_MAX_RAW_CHARS,
    ) -> None:
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self.max_raw_chars = max_raw_chars
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, CanonicalRecord]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, record: CanonicalRecord) -> None:
        """Leaves ``record`` (holding its raw response) for its call's project step."""
        if record.raw is None or len(record.raw) > self.max_raw_chars:
            return
        identity = f"{record.run_id}:{record.tool_call_id}"
        with self._lock:
            self._entries.pop(identity, None)
            self._entries[identity] = (time.monotonic(), record)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def take(self, key: CanonicalKey) -> CanonicalRecord | None:
        """The record left for ``key``, once; ``None`` when none is (or it is too old)."""
        with self._lock:
            entry = self._entries.pop(key.identity, None)
        if entry is None or time.monotonic() - entry[0] > self.max_age_s:
            return None
        return entry[1]


_lock = threading.Lock()
_handover: tuple[int, Handover] | None = None


def process_handover() -> Handover:
    """This process's handover; made anew in a forked child (prefork pool)."""
    global _handover
    pid = os.getpid()
    with _lock:
        if _handover is None or _handover[0] != pid:
            _handover = (pid, Handover())
        return _handover[1]
