"""B3: Redis commands per call, the store's apart from Celery's.

Calls go one at a time through ``ToolBoundary.invoke`` (bare: ``apply_async`` then ``.get``)
while MONITOR tallies every command by DB: the store's DB holds only the store's commands,
the broker's and backend's DBs only Celery's. Commands run inside the store's Lua scripts are
counted apart (MONITOR and ``INFO commandstats`` both list them under their own names). Idle
workers poll the broker; that background, measured with no calls, is taken off.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis

from bench.suite.config import BACKEND_DB, BROKER_DB, OWN_DBS, STORE_DB
from bench.suite.counting import COUNTS, MonitorTally, Tally, commandstats
from bench.suite.sides import Side, call_ids

#: Seconds of idle tally that measure the workers' background polling.
IDLE_S = 2.0
#: Seconds after the last call for the workers' trailing acks and events.
SETTLE_S = 0.5


def _tally(
    client: redis.Redis, server_url: str, action: Callable[[], None]
) -> tuple[Tally, Counter[str]]:
    before = commandstats(client)
    with MonitorTally(server_url, STORE_DB) as monitor:
        action()
        time.sleep(SETTLE_S)
    return monitor.tally, commandstats(client) - before


def _per_call(counts: dict[str, int], calls: int) -> dict[str, float]:
    return {name: round(n / calls, 2) for name, n in counts.items()}


def _side(
    client: redis.Redis, server_url: str, side: Side, calls: int, background: Tally
) -> dict[str, Any]:
    ids = list(call_ids(f"b3{side.name}", calls))

    def run_calls() -> None:
        for run_id, call_id in ids:
            side.invoke(run_id, call_id)

    COUNTS.reset()
    seen, stats = _tally(client, server_url, run_calls)
    caller_round_trips = COUNTS.round_trips
    tally = seen.minus(background, seen.seconds)
    all_seen = seen.total()
    return {
        "calls": calls,
        "store_commands_per_call": tally.total((STORE_DB,), "client") / calls,
        "store_lua_commands_per_call": tally.total((STORE_DB,), "lua") / calls,
        "store_commands": _per_call(tally.by_name(STORE_DB, "client"), calls),
        "store_lua_commands": _per_call(tally.by_name(STORE_DB, "lua"), calls),
        "caller_store_round_trips_per_call": caller_round_trips / calls,
        "celery_commands_per_call": tally.total((BROKER_DB, BACKEND_DB)) / calls,
        "broker_commands_per_call": tally.total((BROKER_DB,)) / calls,
        "backend_commands_per_call": tally.total((BACKEND_DB,)) / calls,
        "broker_commands": _per_call(tally.by_name(BROKER_DB, "client"), calls),
        "backend_commands": _per_call(tally.by_name(BACKEND_DB, "client"), calls),
        # Server-wide, so it includes other clients' commands (the foreign share says how
        # many MONITOR saw on DBs not ours) and the idle workers' background.
        "commandstats_per_call": sum(stats.values()) / calls,
        "foreign_share": 1 - seen.total(OWN_DBS) / all_seen if all_seen else 0.0,
    }


def commands(server_url: str, ours: Side, bare: Side, calls: int) -> dict[str, Any]:
    """Commands per call of both sides; ``server_url`` is the Redis server all DBs are on."""
    client = redis.Redis.from_url(server_url)
    with MonitorTally(server_url, STORE_DB) as idle:
        time.sleep(IDLE_S)
    background = idle.tally
    result: dict[str, Any] = {
        "ours": _side(client, server_url, ours, calls, background),
        "bare": _side(client, server_url, bare, calls, background),
        "background_per_s": background.total(OWN_DBS) / background.seconds,
    }
    result["celery_over_bare"] = (
        result["ours"]["celery_commands_per_call"] / result["bare"]["celery_commands_per_call"]
    )
    return result
