"""Where the benchmark runs: one Redis server, three DBs of its own, and the sizes of each
measurement (full and ``--quick``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from urllib.parse import urlsplit, urlunsplit

from bench.rig.workers import Pool
from tasks.settings import Settings

#: Redis server used when ``--redis-url`` is not given.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
#: The store's, the broker's and the result backend's DBs. Others' tests use 6-15.
STORE_DB, BROKER_DB, BACKEND_DB = 3, 4, 5
OWN_DBS = (STORE_DB, BROKER_DB, BACKEND_DB)
#: Record TTL of the benchmark's calls; long enough for every phase, flushed at the end.
TTL_S = 3600


def db_url(server_url: str, db: int) -> str:
    """``server_url`` pointed at ``db`` (any path it had is replaced)."""
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, ""))


#: The queues of ours with tools run on the task's thread (``bench.peers.inline``, ``--ablate``),
#: in the roles of ours ("tools", "projections").
INLINE_QUEUES = ("inline_tools", "inline_projections")


def bench_settings(server_url: str, *, project_in_line: bool | None = None) -> Settings:
    """Our settings for the benchmark: the store, broker and backend on the bench's DBs;
    ``project_in_line`` overrides the setting's default when given."""
    settings = Settings(
        redis_url=db_url(server_url, STORE_DB),
        broker_url=db_url(server_url, BROKER_DB),
        result_backend=db_url(server_url, BACKEND_DB),
        tools="bench.peers.tools:registry",
        ttl_s=TTL_S,
    )
    if project_in_line is not None:
        settings = settings.model_copy(update={"project_in_line": project_in_line})
    return settings


def add_projection_argument(parser: argparse.ArgumentParser) -> None:
    """``--project-in-line`` / ``--no-project-in-line`` (``args.project_in_line``, ``None``
    when neither is given), for ``bench_settings``."""
    parser.add_argument(
        "--project-in-line",
        action=argparse.BooleanOptionalAction,
        help="our workers project in line (one broker hop a call: the opt-in "
        "TOOL_BOUNDARY_PROJECT_IN_LINE) or, with --no-project-in-line, send the chained "
        "project task (two hops); unset: the settings' default (the chain)",
    )


@dataclass(frozen=True)
class Sizes:
    """How much each measurement does."""

    #: Pools of B1/B2; the first of each pool kind is a headline figure. B3 and B5 run on
    #: the first pool's workers.
    pools: tuple[Pool, ...]
    #: Repetitions per pool, each one ours then bare (or bare then ours, alternating).
    repetitions: int
    #: B1: calls (and bare chains) in flight per repetition.
    b1_calls: int
    #: B1: calls before each measurement, to warm worker and client.
    warmup_calls: int
    #: B2: sequential samples of submit, apply_async and PING per repetition.
    b2_samples: int
    #: B3: calls whose Redis commands are counted.
    b3_calls: int
    #: B4: timed observe calls (and pipelines) on the 100-call run.
    b4_samples: int
    #: B5: runs of ``b5_calls_per_run`` calls reprocessed.
    b5_runs: int
    b5_calls_per_run: int = 10
    #: B5: passes over the same runs (the figure is the median pass's).
    b5_passes: int = 3
    #: B6: raw response sizes, bytes.
    b6_raw_sizes: tuple[int, ...] = (16, 256, 4096, 65536)
    #: B6 at scale: sealed records in the store when memory, reaper and runs are measured.
    b6_records: int = 1_000_000
    #: B7: concurrent ``ainvoke`` calls on one event loop (and ``invoke`` calls on threads).
    b7_calls: int = 500
    #: B7: threads of the sync side.
    b7_threads: int = 32
    #: B7: throughput repetitions (async and sync each, the order flipping).
    b7_repetitions: int = 3
    #: B7: waits measured per requested time (half as many of 1 s).
    b7_samples: int = 10
    #: B7: in-flight counts of the stall measurement (memory and connections at the largest).
    b7_stall_calls: tuple[int, ...] = (60, 200, 1000)
    #: B7: runs of the smallest stall count repeated (the 60-call target: 10 of 10 runs).
    b7_runs: int = 10
    #: ``--peers dbos``: sequential calls a side against DBOS at 10 ms polling.
    dbos_samples: int = 200
    #: ``--peers dbos``: calls in flight and sequential calls against DBOS's 1 s defaults
    #: (about 8 calls a second: B1's sizes would take minutes a repetition).
    dbos_slow_calls: int = 40
    dbos_slow_samples: int = 10


FULL = Sizes(
    pools=(Pool("threads", 8), Pool("prefork", 2), Pool("threads", 4), Pool("prefork", 4)),
    # An even count: as many pairs with ours first as with bare first.
    repetitions=4,
    b1_calls=300,
    warmup_calls=100,
    # A multiple of 6: every order of the three sides equally often (B2).
    b2_samples=300,
    b3_calls=200,
    b4_samples=50,
    b5_runs=10_000,
)

QUICK = replace(
    FULL,
    pools=(Pool("threads", 8),),
    repetitions=1,
    b1_calls=60,
    warmup_calls=20,
    b2_samples=42,
    b3_calls=20,
    b4_samples=5,
    b5_runs=100,
    b5_passes=1,
    b6_raw_sizes=(16, 4096),
    b6_records=2_000,
    b7_calls=40,
    b7_repetitions=1,
    b7_samples=2,
    b7_stall_calls=(20, 60),
    b7_runs=2,
    dbos_samples=12,
    dbos_slow_calls=8,
    dbos_slow_samples=2,
)


def parse_pools(text: str) -> tuple[Pool, ...]:
    """``threads:8,prefork:2`` -> pools."""
    pools = []
    for item in text.split(","):
        name, _, concurrency = item.strip().partition(":")
        if name not in ("threads", "prefork", "solo") or not concurrency.isdigit():
            raise ValueError(f"not a pool: {item!r} (expected e.g. threads:8 or prefork:2)")
        pools.append(Pool(name, int(concurrency)))
    return tuple(pools)
