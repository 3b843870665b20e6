"""The faults the chaos run injects, in a seeded random order: every kind once per round, the
rounds shuffled by the seed, a seeded pause between two faults. Each fault ends with the
system whole again (the server restarted or resumed, the memory limit lifted); a killed
worker is started again by the fleet's supervisor.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

import redis

from bench.rig.servers import RedisServer
from bench.studies.chaos.fleet import Fleet

#: Seconds between two faults.
GAP_S = (2.0, 6.0)
#: Seconds a killed server stays down; a paused one stays paused; a full one stays full.
DOWN_S = (1.0, 5.0)
PAUSE_S = (3.0, 15.0)
FULL_S = (4.0, 10.0)


@dataclass(frozen=True)
class Injected:
    at_s: float
    fault: str
    seconds: float


Fault = Callable[[Fleet, random.Random], float]


def _kill_and_restart(server: RedisServer, rng: random.Random, *, wipe: bool) -> float:
    down = rng.uniform(*DOWN_S)
    server.kill()
    if wipe:
        # Without persistence: the server comes back empty, as one without AOF would.
        shutil.rmtree(server.directory / "appendonlydir", ignore_errors=True)
        (server.directory / "dump.rdb").unlink(missing_ok=True)
    time.sleep(down)
    server.start()
    return down


def _pause(server: RedisServer, rng: random.Random) -> float:
    pause = rng.uniform(*PAUSE_S)
    server.pause()
    time.sleep(pause)
    server.resume()
    return pause


def _full(server: RedisServer, rng: random.Random) -> float:
    """``maxmemory`` set to what the server uses now: every write that needs memory is
    refused (noeviction) until it is lifted."""
    hold = rng.uniform(*FULL_S)
    client = server.client()
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used)
    try:
        time.sleep(hold)
    finally:
        client.config_set("maxmemory", 0)
    return hold


def kill_store(fleet: Fleet, rng: random.Random) -> float:
    if fleet.sentinel is not None:
        return kill_store_master(fleet, rng)
    assert fleet.store is not None
    return _kill_and_restart(fleet.store, rng, wipe=False)


def kill_broker_with_aof(fleet: Fleet, rng: random.Random) -> float:
    return _kill_and_restart(fleet.broker, rng, wipe=False)


def kill_broker_without_aof(fleet: Fleet, rng: random.Random) -> float:
    return _kill_and_restart(fleet.broker, rng, wipe=True)


def pause_store(fleet: Fleet, rng: random.Random) -> float:
    return _pause(_store_master(fleet), rng)


def pause_broker(fleet: Fleet, rng: random.Random) -> float:
    return _pause(fleet.broker, rng)


def store_full(fleet: Fleet, rng: random.Random) -> float:
    return _full(_store_master(fleet), rng)


def broker_full(fleet: Fleet, rng: random.Random) -> float:
    return _full(fleet.broker, rng)


def kill_threads_worker(fleet: Fleet, rng: random.Random) -> float:
    fleet.workers[0].kill()
    return 0.0


def kill_prefork_worker(fleet: Fleet, rng: random.Random) -> float:
    fleet.workers[1].kill()
    return 0.0


def kill_prefork_child(fleet: Fleet, rng: random.Random) -> float:
    children = fleet.workers[1].children()
    if children:
        with suppress(ProcessLookupError):
            os.kill(rng.choice(sorted(children)), signal.SIGKILL)
    return 0.0


def kill_store_master(fleet: Fleet, rng: random.Random) -> float:
    """SIGKILL of the master: the Sentinels promote the replica; the old master comes back as
    its replica."""
    assert fleet.sentinel is not None
    sentinels = fleet.sentinel
    master = sentinels.master()
    started = time.monotonic()
    master.kill()
    _until(lambda: sentinels.master() is not master, "no failover after the master's kill")
    time.sleep(rng.uniform(*DOWN_S))
    sentinels.restart_as_replica(master)
    return time.monotonic() - started


def kill_store_replica(fleet: Fleet, rng: random.Random) -> float:
    assert fleet.sentinel is not None
    sentinels = fleet.sentinel
    replica = sentinels.replica()
    down = rng.uniform(*DOWN_S)
    replica.kill()
    time.sleep(down)
    sentinels.restart_as_replica(replica)
    return down


def sentinel_failover(fleet: Fleet, rng: random.Random) -> float:
    assert fleet.sentinel is not None
    started = time.monotonic()
    fleet.sentinel.failover()
    return time.monotonic() - started


def _store_master(fleet: Fleet) -> RedisServer:
    if fleet.sentinel is not None:
        return fleet.sentinel.master()
    assert fleet.store is not None
    return fleet.store


def _until(condition: Callable[[], bool], what: str, give_up_s: float = 60.0) -> None:
    give_up = time.monotonic() + give_up_s
    while True:
        with suppress(redis.RedisError, StopIteration):
            if condition():
                return
        if time.monotonic() > give_up:
            raise RuntimeError(what)
        time.sleep(0.2)


def catalogue(sentinel: bool) -> dict[str, Fault]:
    """Every fault kind of a run, by name."""
    faults: dict[str, Fault] = {
        "kill store (AOF)": kill_store,
        "kill broker (AOF)": kill_broker_with_aof,
        "kill broker (no AOF)": kill_broker_without_aof,
        "pause store": pause_store,
        "pause broker": pause_broker,
        "store at maxmemory": store_full,
        "broker at maxmemory": broker_full,
        "kill -9 threads worker": kill_threads_worker,
        "kill -9 prefork worker": kill_prefork_worker,
        "kill -9 prefork child": kill_prefork_child,
    }
    if sentinel:
        faults["kill store (AOF)"] = kill_store_master
        faults["kill store replica (AOF)"] = kill_store_replica
        faults["Sentinel failover"] = sentinel_failover
    return faults


class Injector:
    """Injects faults on a thread of its own until ``stop``; keeps what it did."""

    def __init__(
        self, fleet: Fleet, seed: int, *, sentinel: bool, rounds: int | None = None
    ) -> None:
        self.fleet = fleet
        self.rng = random.Random(seed)
        self.faults = catalogue(sentinel)
        self.injected: list[Injected] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        #: Rounds to inject before stopping by itself (``None``: until ``stop``).
        self.rounds = rounds
        #: Set once ``rounds`` rounds were injected (never when ``rounds`` is ``None``).
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
        self._started = 0.0

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _order(self) -> list[str]:
        names = sorted(self.faults)
        self.rng.shuffle(names)
        return names

    def _run(self) -> None:
        rounds = 0
        while not self._stop.is_set():
            if self.rounds is not None and rounds >= self.rounds:
                self.done.set()
                return
            rounds += 1
            for name in self._order():
                if self._stop.wait(self.rng.uniform(*GAP_S)):
                    return
                at = time.monotonic() - self._started
                try:
                    seconds = self.faults[name](self.fleet, self.rng)
                except Exception as exc:  # the chaos run's own trouble: reported, never hidden
                    self.failed.append(f"{name}: {type(exc).__name__}: {exc}")
                    continue
                done = Injected(at_s=round(at, 1), fault=name, seconds=round(seconds, 1))
                self.injected.append(done)
