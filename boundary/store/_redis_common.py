"""What the Redis store modules share: driver errors translated at the edge, scripts loaded
once with the package."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
import redis.cluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from boundary.errors import ErrorCode, StoreError, StoreUnavailable
from boundary.store.scripts import load_script, record_script

__all__ = ["RedisClient", "StoreScript", "load_script", "record_script", "script", "translated"]

#: What the store modules accept as a client (it must decode responses).
RedisClient = redis.Redis | redis.cluster.RedisCluster


class StoreScript(Script):
    """redis-py's ``Script``, sent as one ``EVALSHA`` command on its own client: its checks of
    the client's kind (a pipeline? a cluster pipeline?) cost more than the command's packing,
    on every call of a script a call runs several times. A server that does not know the
    script yet (``NOSCRIPT``: after a restart, a failover, ``SCRIPT FLUSH``) is sent it
    (``SCRIPT LOAD``), then the same ``EVALSHA`` once more. A pipeline given as ``client``
    takes ``Script``'s own path."""

    def __call__(
        self,
        keys: Sequence[Any] | None = None,
        args: Iterable[Any] | None = None,
        client: Any = None,
    ) -> Any:
        if client is not None:
            return super().__call__(keys, args, client)
        keys = keys or ()
        command = ("EVALSHA", self.sha, len(keys), *keys, *(args or ()))
        try:
            return self.registered_client.execute_command(*command)  # type: ignore[no-untyped-call]
        except NoScriptError:
            # (``Script.__call__`` would send the refused EVALSHA a second time before loading.)
            self.registered_client.script_load(self.script)
            return self.registered_client.execute_command(*command)  # type: ignore[no-untyped-call]


def script(client: RedisClient, source: str) -> Script:
    """``client.register_script(source)``, as a ``StoreScript``."""
    return StoreScript(client, source)


@contextmanager
def translated() -> Iterator[None]:
    """Turns driver errors into ours, dropping the driver's text (it may hold URLs, keys)."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        raise StoreUnavailable() from None
    except redis.RedisError:
        raise StoreError(ErrorCode.STORE_UNAVAILABLE) from None
