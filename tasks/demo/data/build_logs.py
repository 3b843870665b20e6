"""Regenerates ``orbit.log``, the bundled log of one eventful morning of Orbit API.

Deterministic (fixed seed, fixed clock), so a rebuild gives the same bytes:
``python tasks/demo/data/build_logs.py``. The story: normal traffic, a deploy at 10:05, a
database primary loss at 10:40 with upstream timeouts until the failover, cache evictions
later on.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

#: Where the log is written: next to this script.
LOG_PATH = Path(__file__).parent / "orbit.log"
#: Fixed seed: the file must not change between rebuilds.
SEED = 20250314
#: The first and last moments of the log.
START = datetime(2025, 3, 14, 9, 0, 0, tzinfo=UTC)
END = datetime(2025, 3, 14, 12, 0, 0, tzinfo=UTC)

ROUTES = ("/v1/passes", "/v1/passes", "/v1/passes", "/v1/bookings", "/v1/satellites")
KEYS = ("key_3f9a1c07", "key_b82e4d51", "key_0c7719ae", "key_e5d2a9f4")
PLANS = ("free", "free", "team")


def _at(hour: int, minute: int) -> datetime:
    return START.replace(hour=hour, minute=minute)


FAILURE_START = _at(10, 40)
FAILOVER_DONE = _at(10, 46)
RECOVERED = _at(10, 58)


def _normal(rng: random.Random) -> tuple[str, str, str]:
    roll = rng.random()
    route = rng.choice(ROUTES)
    if roll < 0.62:
        ms = rng.randint(18, 240)
        return "INFO", "api", f"request completed route={route} status=200 duration_ms={ms}"
    if roll < 0.70:
        return "INFO", "cache", f"hit ratio {rng.uniform(0.91, 0.97):.2f} shard={rng.randint(1, 4)}"
    if roll < 0.76:
        key, plan = rng.choice(KEYS), rng.choice(PLANS)
        return "WARN", "api", f"rate limited key={key} plan={plan}"
    if roll < 0.82:
        return "INFO", "db", f"checkpoint complete wal_mb={rng.randint(40, 180)}"
    if roll < 0.86:
        return "WARN", "db", f"slow query duration_ms={rng.randint(900, 2400)} table=passes"
    if roll < 0.89:
        return "WARN", "api", f"client error route={route} status=401 reason=key_revoked"
    if roll < 0.91:
        return "ERROR", "api", f"upstream timeout after 5000ms route={route}"
    ms = rng.randint(80, 600)
    return "INFO", "api", f"request completed route=/v1/bookings status=201 duration_ms={ms}"


def _failing(rng: random.Random, now: datetime) -> tuple[str, str, str]:
    roll = rng.random()
    route = rng.choice(ROUTES)
    if now < FAILOVER_DONE:
        if roll < 0.40:
            return "ERROR", "api", f"upstream timeout after 5000ms route={route}"
        if roll < 0.55:
            return "ERROR", "db", "primary unreachable host=db-1 attempts=3"
        if roll < 0.75:
            return "WARN", "db", f"connection pool exhausted waiting={rng.randint(20, 90)}"
        if roll < 0.85:
            return "ERROR", "api", f"request failed route={route} status=503"
        return "WARN", "db", f"replication lag {rng.randint(8, 40)}s replica=db-2"
    if roll < 0.35:
        return "WARN", "cache", f"miss burst misses_per_s={rng.randint(800, 2400)}"
    if roll < 0.50:
        return "ERROR", "api", f"upstream timeout after 5000ms route={route}"
    ms = rng.randint(300, 1900)
    return "INFO", "api", f"request completed route={route} status=200 duration_ms={ms}"


def _scripted() -> list[tuple[datetime, str, str, str]]:
    """Events at fixed times: the deploy, the failover, the evictions."""
    return [
        (_at(10, 5), "INFO", "api", "deploy started version=2.14.0 canary=5%"),
        (_at(10, 21), "INFO", "api", "canary promoted version=2.14.0 error_rate=0.3%"),
        (_at(10, 38), "WARN", "db", "replication lag 12s replica=db-2"),
        (_at(10, 43), "WARN", "db", "failover started promote=db-2 fence=db-1"),
        (FAILOVER_DONE, "INFO", "db", "failover complete primary=db-2 write_outage_s=74"),
        (_at(11, 20), "WARN", "cache", "evictions 620/s shard=3 used_memory=11.8GB"),
        (_at(11, 24), "WARN", "cache", "evictions 540/s shard=3 used_memory=11.9GB"),
        (_at(11, 31), "INFO", "cache", "shard added shard=5 rebalancing=true"),
    ]


def events(rng: random.Random) -> Iterator[tuple[datetime, str, str, str]]:
    now = START
    while now < END:
        failing = FAILURE_START <= now < RECOVERED
        step = rng.uniform(2.0, 8.0) if failing else rng.uniform(20.0, 60.0)
        now += timedelta(seconds=step, milliseconds=rng.randint(0, 999))
        if now >= END:
            return
        yield (now, *(_failing(rng, now) if failing else _normal(rng)))


def render() -> str:
    rng = random.Random(SEED)
    lines = sorted([*events(rng), *_scripted()], key=lambda event: event[0])
    return "".join(
        f"{ts.strftime('%Y-%m-%dT%H:%M:%S.')}{ts.microsecond // 1000:03d}Z "
        f"{level} {service} {message}\n"
        for ts, level, service, message in lines
    )


if __name__ == "__main__":
    LOG_PATH.write_text(render(), encoding="utf-8")
