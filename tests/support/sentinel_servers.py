"""A Redis master, its replica and three Sentinels of the test's own: the rig's Sentinel set
(``bench.rig.sentinel``) on the suite's ports; stopped when the block ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.rig.sentinel import SentinelSet
from tests.support.servers import PORTS, redis_server_binary


@contextmanager
def sentinel_setup(directory: Path) -> Iterator[SentinelSet]:
    """A master, a replica of it and three Sentinels that agree on both."""
    redis_server_binary()
    sentinels = SentinelSet(directory, PORTS)
    try:
        yield sentinels
    finally:
        sentinels.stop()
