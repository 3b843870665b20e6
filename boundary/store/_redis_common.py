"""What the Redis store modules share: driver errors translated at the edge, scripts loaded
once with the package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
import redis.cluster

from boundary.errors import ErrorCode, StoreError, StoreUnavailable
from boundary.store.scripts import load_script, record_script

__all__ = ["RedisClient", "load_script", "record_script", "translated"]

#: What the store modules accept as a client (it must decode responses).
RedisClient = redis.Redis | redis.cluster.RedisCluster


@contextmanager
def translated() -> Iterator[None]:
    """Turns driver errors into ours, dropping the driver's text (it may hold URLs, keys)."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        raise StoreUnavailable() from None
    except redis.RedisError:
        raise StoreError(ErrorCode.STORE_UNAVAILABLE) from None
