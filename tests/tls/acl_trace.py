"""What each ACL user sends, for re-deriving the command lists of
``docs/how-to/production-redis.acl`` (not a test; off unless asked).

``TB_TEST_ACL_TRACE=DIR pytest tests/tls -n 0``: each TLS server of the run is watched by the
tests' admin with ``MONITOR`` (every command, a script's own commands on ``lua`` lines right
after the ``EVALSHA`` that ran them) while ``CLIENT LIST`` is read every 20 ms to name each
connection's user (``MONITOR`` hides the user of ``AUTH`` and ``HELLO``). When the server
stops, ``DIR/<port>-<ns>.json`` holds ``{user: [command, ...]}``; a connection that came and
went between two reads of ``CLIENT LIST`` is under ``"?"``. Then:
``python -m tests.tls.acl_trace DIR`` prints the union by user."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import redis

#: Commands whose second word is a subcommand in ACL rules (``+client|setname``).
CONTAINERS = frozenset(
    [
        "acl",
        "client",
        "cluster",
        "command",
        "config",
        "function",
        "latency",
        "memory",
        "module",
        "object",
        "pubsub",
        "script",
        "slowlog",
        "xgroup",
        "xinfo",
    ]
)
#: How often ``CLIENT LIST`` is read, seconds.
POLL_S = 0.02


class AclTrace:
    """Watches one server (its ``client()`` is the tests' admin) until ``dump``."""

    def __init__(self, client: Any, out: Path, name: str) -> None:
        self.client = client
        self.out = out
        self.name = name
        self.users: dict[str, str] = {}
        self.used: dict[str, set[str]] = defaultdict(set)
        self.stopped = threading.Event()
        self.last = "?"
        for target in (self._poll, self._monitor):
            threading.Thread(target=target, daemon=True).start()

    def _poll(self) -> None:
        client = self.client()
        while not self.stopped.is_set():
            try:
                for connection in client.client_list():
                    self.users[connection["addr"]] = connection["user"]
            except redis.RedisError:
                pass
            self.stopped.wait(POLL_S)

    def _monitor(self) -> None:
        try:
            with self.client().monitor() as monitor:
                for line in monitor.listen():
                    words = str(line["command"]).split()
                    if not words:
                        continue
                    name = words[0].lower()
                    if name in CONTAINERS and len(words) > 1:
                        name = f"{name}|{words[1].lower()}"
                    if line.get("client_type") != "lua":
                        self.last = f"{line['client_address']}:{line['client_port']}"
                    self.used[self.last].add(name)
        except (redis.RedisError, OSError, ValueError):
            return

    def dump(self) -> None:
        self.stopped.set()
        by_user: dict[str, set[str]] = defaultdict(set)
        for addr, names in list(self.used.items()):
            by_user[self.users.get(addr, "?")] |= names
        path = self.out / f"{self.name}-{time.time_ns()}.json"
        path.write_text(json.dumps({user: sorted(names) for user, names in by_user.items()}))


def union(directory: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(directory.glob("*.json")):
        for user, names in json.loads(path.read_text()).items():
            found[user] |= set(names)
    return found


if __name__ == "__main__":
    for user, names in sorted(union(Path(sys.argv[1])).items()):
        print(user, " ".join(sorted(names)))
