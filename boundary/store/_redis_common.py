"""What the Redis store modules share: driver errors translated at the edge, scripts loaded
once with the package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources

import redis
import redis.cluster

from boundary.errors import ErrorCode, StoreError, StoreUnavailable

#: What the store modules accept as a client (it must decode responses).
RedisClient = redis.Redis | redis.cluster.RedisCluster


def load_script(name: str) -> str:
    """The source of ``lua/<name>.lua``."""
    return resources.files("boundary.store").joinpath("lua", f"{name}.lua").read_text("utf-8")


@contextmanager
def translated() -> Iterator[None]:
    """Turns driver errors into ours, dropping the driver's text (it may hold URLs, keys)."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        raise StoreUnavailable() from None
    except redis.RedisError:
        raise StoreError(ErrorCode.STORE_UNAVAILABLE) from None
