"""Counting Redis commands three ways.

- ``CountingConnection``: round trips and replies of this process's store client (a pipeline
  is one round trip and many replies).
- ``MonitorTally``: every command the server runs while it listens, by DB, by source (a
  client, or a Lua script) and by name. The store, the broker and the backend share one
  server (and other people's tests use other DBs of it), so only the DB tells them apart.
- ``commandstats``: the server's own ``INFO commandstats`` call counts, for deltas.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis


@dataclass
class Counts:
    round_trips: int = 0
    replies: int = 0

    def reset(self) -> None:
        self.round_trips = self.replies = 0


#: What every ``CountingConnection`` adds to.
COUNTS = Counts()


class CountingConnection(redis.Connection):
    """A connection that counts what it sends (round trips) and reads (one reply a command)."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        COUNTS.round_trips += 1
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        COUNTS.replies += 1
        return super().read_response(*args, **kwargs)


class CountingSSLConnection(CountingConnection, redis.SSLConnection):
    """``CountingConnection`` over TLS (a ``rediss://`` URL: the bench's TLS-cost runs)."""


def counting_connection(url: str) -> type[redis.Connection]:
    """The counting connection class for ``url``'s scheme."""
    return CountingSSLConnection if url.lower().startswith("rediss://") else CountingConnection


def commandstats(client: redis.Redis) -> Counter[str]:
    """Calls per command name since the server started (or its stats were reset)."""
    info: dict[str, Any] = client.info("commandstats")
    return Counter(
        {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in info.items()}
    )


_LINE = re.compile(rb'^\S+ \[(\d+) ([^\]]*)\] "([^"]*)"')
#: Sent on a DB of our own when a tally stops: everything before it has been seen.
_MARKER = "bench-monitor-end"


@dataclass
class Tally:
    """Commands seen, by (db, source, NAME); source is ``"lua"`` or ``"client"``."""

    commands: Counter[tuple[int, str, str]] = field(default_factory=Counter)
    seconds: float = 0.0

    def total(self, dbs: tuple[int, ...] | None = None, source: str | None = None) -> int:
        return sum(
            n
            for (db, src, _), n in self.commands.items()
            if (dbs is None or db in dbs) and (source is None or src == source)
        )

    def by_name(self, db: int, source: str) -> dict[str, int]:
        return {
            name: n
            for (d, src, name), n in sorted(self.commands.items())
            if d == db and src == source
        }

    def minus(self, background: Tally, seconds: float) -> Tally:
        """This tally without ``background``'s rate over ``seconds`` (idle workers poll)."""
        if background.seconds <= 0:
            return self
        scale = seconds / background.seconds
        left = Counter(
            {
                key: max(0, round(n - background.commands.get(key, 0) * scale))
                for key, n in self.commands.items()
            }
        )
        return Tally(+left, self.seconds)


class MonitorTally:
    """Runs MONITOR in a thread while the block runs; ``tally`` holds what it saw.

    Args:
        server_url: the server (``redis://host:port``, any DB).
        marker_db: a DB of our own, where the end marker is sent.
    """

    def __init__(self, server_url: str, marker_db: int) -> None:
        self._pool = redis.ConnectionPool.from_url(server_url)
        self._marker_client = redis.Redis.from_url(server_url, db=marker_db)
        # Connect (and SELECT) now, so the connection's setup is not tallied.
        self._marker_client.ping()
        self._marker_db = marker_db
        self.tally = Tally()
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._began = 0.0

    def __enter__(self) -> MonitorTally:
        self._thread = threading.Thread(target=self._listen, name="bench-monitor", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("MONITOR did not start")
        self._began = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.tally.seconds = time.perf_counter() - self._began
        self._marker_client.echo(_MARKER)
        assert self._thread is not None
        self._thread.join(30)
        self._marker_client.close()
        self._pool.disconnect()

    def _listen(self) -> None:
        connection = self._pool.get_connection()
        try:
            connection.send_command("MONITOR")
            connection.read_response()
            self._started.set()
            commands = self.tally.commands
            while True:
                line = connection.read_response(disable_decoding=True)
                match = _LINE.match(line)
                if match is None:
                    continue
                db, who, name = int(match[1]), match[2], match[3].decode().upper()
                source = "lua" if who == b"lua" else "client"
                if name == "ECHO" and db == self._marker_db and _MARKER.encode() in line:
                    return
                commands[(db, source, name)] += 1
        finally:
            connection.disconnect()
