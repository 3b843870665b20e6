"""The store as a worker's execute step uses it: each operation retried in place.

The execute task used to retry the whole step on a store error, tool run included: a store
that failed after the tool returned (while its raw response was being kept) made the tool
run again in the same task, once per retry (found by the chaos run: calls whose attempt ran
two and three times while the store was paused). Here each store operation is retried where
it failed, so a tool that ran is never run again for a store blip: its raw response is kept
once the store answers, or, past the retries, the step gives up and the reaper retries or
ends the call as its tool's policy says.

``retrying`` retries one store operation the same way, for the tasks' other reads and writes
(a Celery retry would write a traceback into the result backend).

The heartbeat is not retried: a tool makes it often, and it gives up at once by design (the
next one tries again).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from boundary import StoreError
from boundary.formats import FormatTooNew
from boundary.store import CanonicalStore

T = TypeVar("T")

#: Attempts at a store operation inside a task before giving up on it: 3.5 s in all, longer
#: than a Sentinel failover (2.2-2.5 s measured), so a tool that ends during one keeps its
#: result instead of ending WORKER_LOST.
STORE_ATTEMPTS = 4
#: Pause between those attempts, seconds (doubles each time).
STORE_RETRY_DELAY_S = 0.5


def retrying(step: Callable[[], T]) -> T:
    """Retries ``step`` on store errors inside the task (a Celery retry would write a
    traceback into the result backend)."""
    delay = STORE_RETRY_DELAY_S
    for attempt in range(1, STORE_ATTEMPTS + 1):
        try:
            return step()
        except FormatTooNew:
            raise  # a newer version's record: no retry reads it (boundary.formats)
        except StoreError:
            if attempt == STORE_ATTEMPTS:
                raise
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


#: Store operations made once (the caller copes with a failure).
_ONCE = frozenset({"heartbeat"})


class StepStore:
    """``store`` with every operation but ``heartbeat`` run through ``retry``."""

    def __init__(self, store: CanonicalStore, retry: Callable[[Callable[[], Any]], Any]) -> None:
        self._store = store
        self._retry = retry

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name in _ONCE or name.startswith("_") or not callable(value):
            return value
        # A partial, not a function made with ``functools.wraps`` (an execute step takes two
        # a READY call; copying the attributes cost some 4 us each).
        return functools.partial(_retried, self._retry, value)


def _retried(
    retry: Callable[[Callable[[], Any]], Any], operation: Any, *args: Any, **kwargs: Any
) -> Any:
    """``operation(*args, **kwargs)`` through ``retry``."""
    return retry(lambda: operation(*args, **kwargs))


def step_store(store: CanonicalStore, retry: Callable[[Callable[[], T]], T]) -> CanonicalStore:
    """``store`` for a step, typed as the store it wraps."""
    return cast(CanonicalStore, StepStore(store, retry))
