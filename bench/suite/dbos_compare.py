"""``--peers dbos``: ours against DBOS, side by side in one run, in alternating pairs.

For each DBOS side (``bench.peers.dbos_side.SIDES``: 10 ms polling, DBOS's 1 s defaults):

- **throughput**: ``repetitions`` pairs of B1's measurement (``calls`` in flight, sent then
  awaited from this one thread), ours and the DBOS side in turns, the order flipping each
  pair; the ratio ours / DBOS is taken per pair and quoted as the median with its spread.
  Beside it, CPU per call: the worker's process group, this client, and the server behind
  each side (Redis's ``INFO cpu`` for ours, the database's PostgreSQL backends for DBOS).
- **sequential**: ``samples`` calls a side one at a time, alternating (ours then DBOS, DBOS
  then ours): the send (``submit`` / ``DBOSClient.enqueue``) and the whole call, p50 and p99,
  and the p50 ratios per block of samples (``repetitions`` blocks) with their spread.

The DBOS defaults side polls once a second: it is measured with ``slow_calls`` and
``slow_samples`` instead, so a run stays minutes long.
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.peers.dbos_side import (
    DEFAULT_DB_PREFIX,
    DEFAULT_PG_URL,
    DEFAULT_POLLING_S,
    SIDES,
    DbosSide,
    DbosWorkerProcess,
    own_database,
    require_dbos,
)
from bench.reports.stats import ms, percentile, spread
from bench.rig.workers import Pool, running
from bench.suite.b1_throughput import Sample, measure
from bench.suite.config import Sizes
from bench.suite.cpu import PgBackends
from bench.suite.sides import Side, call_ids

#: Peers beyond bare Celery that ``--peers`` adds (each a phase of its own).
EXTRA_PEERS = ("dbos",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m bench``'s options of the DBOS comparison."""
    parser.add_argument(
        "--peers",
        type=_peers,
        default=(),
        help="also compare against these peers, e.g. dbos (PostgreSQL, see --pg-url)",
    )
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help="--peers dbos: a PostgreSQL server and a role that may create databases",
    )
    parser.add_argument(
        "--pg-db-prefix",
        default=DEFAULT_DB_PREFIX,
        help="--peers dbos: the bench's database is <prefix>_<pid>, created and dropped",
    )


def _peers(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in EXTRA_PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer {unknown[0]!r} (known: dbos)")
    return names


def throughput(
    ours: Side,
    peer: Side,
    pgids: dict[str, int],
    calls: int,
    repetitions: int,
    servers: dict[str, Any],
) -> dict[str, Any]:
    """``repetitions`` alternating pairs of B1 (``calls`` in flight) on ours and ``peer``."""
    pairs: list[dict[str, Sample]] = []
    for rep in range(repetitions):
        order = (ours, peer) if rep % 2 == 0 else (peer, ours)
        pairs.append(
            {
                side.name: measure(side, calls, pgids[side.name], servers.get(side.name))
                for side in order
            }
        )
    ratios = [pair[ours.name].per_s / pair[peer.name].per_s for pair in pairs]
    out: dict[str, Any] = {"calls": calls, "repetitions": repetitions}
    for side in (ours, peer):
        key = "ours" if side is ours else "peer"
        out[f"{key}_per_s"] = [pair[side.name].per_s for pair in pairs]
        out[key] = [_costs(pair[side.name]) for pair in pairs]
    out["ratios"] = ratios
    out["ratio"] = spread(ratios)
    busy = [pair[side.name].others_busy for pair in pairs for side in (ours, peer)]
    out["others_busy"] = spread([b for b in busy if b is not None])
    return out


def _costs(sample: Sample) -> dict[str, Any]:
    return {
        "seconds": sample.seconds,
        "worker_cpu_ms": sample.worker_cpu_ms,
        "client_cpu_ms": sample.client_cpu_ms,
        "server_cpu_ms": sample.redis_cpu_ms,
        "others_busy": sample.others_busy,
    }


def _timed_call(side: Side, run_id: str, tool_call_id: str) -> tuple[float, float]:
    began = time.perf_counter()
    handle = side.send(run_id, tool_call_id)
    sent = time.perf_counter() - began
    side.wait(handle)
    return sent, time.perf_counter() - began


def sequential(ours: Side, peer: Side, samples: int, blocks: int) -> dict[str, Any]:
    """``samples`` sequential calls a side, alternating; p50/p99 and per-block p50 ratios."""
    times: dict[str, dict[str, list[float]]] = {
        name: {"submit": [], "call": []} for name in ("ours", "peer")
    }
    ids = {side.name: call_ids(f"dbseq{side.name}", samples) for side in (ours, peer)}
    for n in range(samples):
        order = (ours, peer) if n % 2 == 0 else (peer, ours)
        for side in order:
            sent, total = _timed_call(side, *next(ids[side.name]))
            key = "ours" if side is ours else "peer"
            times[key]["submit"].append(sent)
            times[key]["call"].append(total)
    out: dict[str, Any] = {"samples": samples}
    for key, kinds in times.items():
        for kind, values in kinds.items():
            out[f"{key}_{kind}_p50_ms"] = ms(percentile(values, 50))
            out[f"{key}_{kind}_p99_ms"] = ms(percentile(values, 99))
    size = max(1, samples // max(1, blocks))
    for kind in ("submit", "call"):
        ratios = []
        for start in range(0, samples - size + 1, size):
            ours_p50 = percentile(times["ours"][kind][start : start + size], 50)
            peer_p50 = percentile(times["peer"][kind][start : start + size], 50)
            ratios.append(ours_p50 / peer_p50)
        out[f"{kind}_p50_ratios"] = ratios
        out[f"{kind}_p50_ratio"] = spread(ratios)
    return out


def compare(
    ours: Side,
    peers: list[tuple[Side, int, int]],
    pgids: dict[str, int],
    repetitions: int,
    servers: dict[str, Any],
    warmup_calls: int,
) -> dict[str, Any]:
    """Every DBOS side in ``peers`` (side, calls in flight, sequential samples) against ours."""
    out: dict[str, Any] = {}
    for peer, calls, samples in peers:
        measure(peer, min(warmup_calls, calls), pgids[peer.name])
        out[peer.name] = {
            "throughput": throughput(ours, peer, pgids, calls, repetitions, servers),
            "sequential": sequential(ours, peer, samples, repetitions),
        }
    return out


class DbosPeers:
    """The DBOS sides of one run: their database (made on entry, dropped on exit), their
    clients, and per pool their workers, each up only while its side is measured (DBOS polls
    its queue even when idle; no other measurement must share the CPU with it)."""

    def __init__(self, pg_url: str, prefix: str, log_dir: Path) -> None:
        self.pg_url, self.prefix, self.log_dir = pg_url, prefix, log_dir
        self._stack = ExitStack()
        self.sides: list[DbosSide] = []
        self.db_url = ""

    def __enter__(self) -> DbosPeers:
        require_dbos()
        try:
            self.db_url = self._stack.enter_context(own_database(self.pg_url, self.prefix))
            for name, polling_s in SIDES:
                side = DbosSide(name, self.db_url, polling_s)
                self._stack.callback(side.close)
                self.sides.append(side)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _worker(self, side: DbosSide, pool: Pool) -> DbosWorkerProcess:
        process = DbosWorkerProcess(
            name=side.name,
            db_url=self.db_url,
            queue=side.queue,
            pool=pool,
            polling_s=side.polling_s,
            log_dir=self.log_dir,
        )
        # One at a time: the first one made the new database's tables.
        process.await_ready()
        return process

    def measure(
        self, ours: Side, ours_pgid: int, pool: Pool, sizes: Sizes, server: Any
    ) -> dict[str, Any]:
        """Ours (its worker up, ``ours_pgid``) against each DBOS side on ``pool``'s
        concurrency; ``server``: a client of our Redis server (its CPU)."""
        dbname = urlsplit(self.db_url).path.lstrip("/")
        got: dict[str, Any] = {}
        for side in self.sides:
            # One DBOS worker up at a time: the 10 ms side's idle polling must not tax the
            # defaults side's measurement (nor its database's CPU).
            with running(partial(self._worker, side, pool)) as (process,):
                pgids = {side.name: process.pgid, ours.name: ours_pgid}
                servers = {ours.name: server, side.name: PgBackends(dbname)}
                slow = side.polling_s >= DEFAULT_POLLING_S
                calls = sizes.dbos_slow_calls if slow else sizes.b1_calls
                samples = sizes.dbos_slow_samples if slow else sizes.dbos_samples
                plan: list[tuple[Side, int, int]] = [(side, calls, samples)]
                got |= compare(ours, plan, pgids, sizes.repetitions, servers, sizes.warmup_calls)
        return {
            "pool": pool.name,
            "concurrency": pool.concurrency,
            "polling_s": {side.name: side.polling_s for side in self.sides},
            "sides": got,
        }
