"""One benchmark at a time per Redis server on this host: runs share DBs 3-5 and flush them,
so a second run (the quick test, say) waits for the first instead of wiping its data."""

from __future__ import annotations

import fcntl
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit


class Busy(Exception):
    """Another benchmark held the lock for longer than we would wait."""


def lock_path(redis_url: str) -> Path:
    parts = urlsplit(redis_url)
    name = f"tool-boundary-bench-{parts.hostname}-{parts.port or 6379}.lock"
    return Path(tempfile.gettempdir()) / name


@contextmanager
def exclusive(
    redis_url: str, wait_s: float, on_wait: Callable[[], None] | None = None
) -> Iterator[None]:
    """Holds the host-wide lock of ``redis_url``'s benchmark DBs; waits up to ``wait_s``."""
    path = lock_path(redis_url)
    with path.open("a") as handle:
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Busy(str(path)) from None
                if not told and on_wait is not None:
                    on_wait()
                    told = True
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
