"""``python -m bench``: starts its own workers against a real Redis, measures B1-B9 in one
run, and writes the report (JSON, a PNG chart of B1 and B2, a Markdown summary)."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import redis

from bench.reports.report import figures, print_table, write_outputs
from bench.reports.stats import quoted
from bench.rig.proxy import Distance
from bench.rig.servers import RedisServer
from bench.rig.workers import Pool, WorkerProcess, running
from bench.suite import (
    b1_throughput,
    b2_latency,
    b3_commands,
    b4_observe,
    b5_reprocess,
    b6_memory,
    b6_scale,
    b7_async,
    b8_turns,
    b9_live_during_job,
    dbos_compare,
)
from bench.suite.config import (
    DEFAULT_REDIS_URL,
    FULL,
    OWN_DBS,
    QUICK,
    Sizes,
    add_projection_argument,
    bench_settings,
    db_url,
    parse_pools,
)
from bench.suite.counting import counting_connection
from bench.suite.fixtures import ensure_scripts
from bench.suite.lock import Busy, exclusive
from bench.suite.meta import load, machine
from bench.suite.sides import (
    Bare,
    BareOne,
    BareSpaced,
    Defaults,
    Inline,
    Ours,
    Side,
    make_store,
)

ROOT = Path(__file__).resolve().parents[2]
#: b9 (live calls during a re-projection job) starts a fleet of its own and flushes the DBs:
#: it runs last.
PHASES = ("b1", "b2", "b3", "b4", "b5", "b6", "b6s", "b7", "b8", "b9")
#: Seconds a run waits for another one on the same Redis server (they share DBs 3-5).
DEFAULT_LOCK_WAIT_S = 900.0
#: Exit status when that wait runs out (EX_TEMPFAIL).
EXIT_BUSY = 75


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS_URL, help="Redis server; the bench uses DBs 3, 4, 5"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: small N, one pool")
    parser.add_argument("--json", action="store_true", help="print one JSON document to stdout")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "out", help="where the report is written"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="also write the run's JSON here, e.g. bench/results/SET/run1.json, for "
        "python -m bench.reports.readme to quote",
    )
    parser.add_argument("--only", default=",".join(PHASES), help="phases to run, e.g. b1,b2")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile submit (pyinstrument) and the workers (py-spy, if installed)",
    )
    parser.add_argument(
        "--ablate",
        action="store_true",
        help="B1 also measures ours with tools and projectors run on the task's thread (no "
        "time limit; bench.peers.inline): what the time limits' thread hand-offs cost",
    )
    parser.add_argument(
        "--peer-events",
        choices=("both", "stock"),
        default="both",
        help="both: B1/B2 also measure the fair peer with our worker's event spacing "
        "(bench.peers.bare_spaced: like for like, the boundary's own cost) beside the stock "
        "peer (the shipping default against stock Celery); stock: the stock peer only",
    )
    parser.add_argument(
        "--fair-peers-only",
        action="store_true",
        help="B1/B2 against the fair peer (stock, and with our event spacing) only: no "
        "Celery-defaults peer, no one-task peer (a shorter run of the chain's figures)",
    )
    dbos_compare.add_arguments(parser)
    add_projection_argument(parser)
    parser.add_argument("--pools", type=parse_pools, help="B1/B2 pools, e.g. threads:8,prefork:2")
    parser.add_argument("--calls", type=int, help="B1 calls a side per repetition")
    parser.add_argument("--repetitions", type=int, help="B1 repetitions per pool")
    parser.add_argument("--b5-runs", type=int, help="B5 runs to reprocess")
    parser.add_argument(
        "--b8-processes",
        type=int,
        default=1,
        help="B8's worker processes of ours, each of the first pool (default 1; the docs "
        "recommend one a core)",
    )
    parser.add_argument("--b6-records", type=int, help="B6 at scale: sealed records written")
    parser.add_argument(
        "--b7-runs",
        type=int,
        help="B7: runs of the smallest stall count repeated (e.g. 10: the 60-call target)",
    )
    parser.add_argument(
        "--b7-levels",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        help="B7: in-flight counts of the stall measurement, e.g. 60,200,1000",
    )
    parser.add_argument(
        "--delay-ms",
        type=float,
        help="put a proxy process (bench.rig.proxy) between every client and worker of B1-B8 "
        "and Redis, adding this delay each way (0: the proxy alone)",
    )
    parser.add_argument(
        "--redis-aof",
        choices=("everysec", "always"),
        help="start a private redis-server with an append-only file fsynced that often "
        "(data under --out) and run on it instead of --redis-url: store, broker and backend, "
        "every side alike",
    )
    parser.add_argument(
        "--lock-wait",
        type=float,
        default=DEFAULT_LOCK_WAIT_S,
        help="seconds to wait for another benchmark run on the same Redis to finish",
    )
    return parser.parse_args(argv)


def reachable(url: str) -> bool:
    try:
        with redis.Redis.from_url(db_url(url, OWN_DBS[0]), socket_connect_timeout=2) as client:
            client.ping()
    except (redis.RedisError, ValueError):
        return False
    return True


def flush_own_dbs(url: str) -> None:
    """FLUSHDB on the bench's DBs only: the server's other DBs belong to others."""
    for db in OWN_DBS:
        with redis.Redis.from_url(db_url(url, db)) as client:
            client.flushdb()


def _interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so every worker the bench started is stopped."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


class Bench:
    """One run: for each pool, both workers up, B1 and B2 (and, on the first pool, B3 and
    B5); then B4 and B6, which need no worker."""

    def __init__(self, args: argparse.Namespace, sizes: Sizes) -> None:
        self.args = args
        self.sizes = sizes
        self.phases = set(args.only.split(","))
        #: ``--delay-ms``: the sides and their workers reach Redis through the delay proxy.
        via = getattr(args, "proxy_url", None) or args.redis_url
        self.settings = bench_settings(via, project_in_line=args.project_in_line)
        store = make_store(
            self.settings, connection_class=counting_connection(self.settings.store_url)
        )
        self.ours = Ours(self.settings, store=store)
        self.bare = Bare(self.settings)
        self.defaults = Defaults(self.settings)
        #: The fair peer first: B1's ``ratio`` and B2's ratios are against it. The one-task
        #: peer is the fair peer of a call projected in line (``bare_one_ratio``).
        self.peers: list[Side] = [self.bare]
        if not args.fair_peers_only:
            self.peers += [self.defaults, BareOne(self.settings)]
        if args.peer_events == "both":
            # Like for like: the fair peer's chain with our worker's event spacing.
            self.peers.append(BareSpaced(self.settings))
        #: A client of the Redis server, whose CPU B1 measures (INFO cpu).
        self.server = redis.Redis.from_url(args.redis_url)
        #: B1 only: the ablation, measured as one more peer (``inline_ratio``).
        self.ablations: list[Side] = [Inline(self.settings, store=store)] if args.ablate else []
        self.results: dict[str, Any] = {"b1": {}, "b2": {}}
        #: ``--peers dbos``: DBOS's sides, entered for the run (its database).
        self.dbos: dbos_compare.DbosPeers | None = None
        if "dbos" in args.peers:
            self.phases.add("dbos")
            self.dbos = dbos_compare.DbosPeers(args.pg_url, args.pg_db_prefix, args.out / "logs")
            self.results["dbos"] = {}

    def run(self) -> dict[str, Any]:
        began = time.monotonic()
        ensure_scripts(self.ours.store)
        if self.phases & {"b1", "b2", "b3", "b7", "b8", "dbos"}:
            # B3, B7 and B8 run on the first pool only: the others are started for B1/B2.
            pools = self.sizes.pools
            if not self.phases & {"b1", "b2", "dbos"}:
                pools = pools[:1]
            with self.dbos or nullcontext():
                for index, pool in enumerate(pools):
                    self.on_pool(pool, first=index == 0)
        if "b5" in self.phases:
            self.b5()
        if "b4" in self.phases:
            log("B4: observe on a 100-call run")
            self.results["b4"] = b4_observe.observe(self.ours, self.sizes.b4_samples)
        if "b6" in self.phases:
            log("B6: memory per record")
            self.results["b6"] = b6_memory.memory(self.ours.store, self.sizes.b6_raw_sizes)
        if "b6s" in self.phases:
            log(f"B6 at scale: {self.sizes.b6_records:,} records")
            # On a store of its own: it counts every run the store holds (B4's and B6's too).
            # FLUSHDB keeps the server's loaded scripts, which its pipelines need.
            self.ours.store.client.flushdb()
            self.results["b6_scale"] = b6_scale.scale(self.ours.store, self.sizes.b6_records)
            # ASYNC: a million keys take longer to free than the store's socket timeout.
            self.ours.store.client.flushdb(asynchronous=True)
            ensure_scripts(self.ours.store)
        if "b9" in self.phases:
            self.b9()
        self.results["seconds"] = time.monotonic() - began
        return self.results

    def _worker(self, side: Side, pool: Pool, name: str | None = None) -> WorkerProcess:
        return WorkerProcess(
            module=side.module,
            name=name or side.name,
            app=side.app,
            settings=self.settings,
            pool=pool,
            queues=side.queues,
            log_dir=self.args.out / "logs",
        )

    def on_pool(self, pool: Pool, *, first: bool) -> None:
        sides: list[Side] = [self.ours]
        if self.phases - {"dbos", "b4", "b6", "b6s"}:
            sides += [*self.peers, *self.ablations]
        log(f"{pool.label}: starting the workers of {len(sides)} sides")
        starts = [partial(self._worker, side, pool) for side in sides]
        with running(*starts) as started:
            pgids = {process.name: process.pgid for process in started}
            for side in sides:
                b1_throughput.warm_up(side, self.sizes.warmup_calls, pgids[side.name])
            if "b1" in self.phases:
                self.b1(pool, pgids)
                if self.args.profile:
                    self.profile_workers(pool, pgids)
            if "b2" in self.phases:
                self.b2(pool, first=first)
            if first and "b3" in self.phases:
                self.b3()
            if first and "b7" in self.phases:
                self.b7(pool)
            if first and "b8" in self.phases:
                self.b8(pool, started[0])
            if self.dbos is not None:
                self.dbos_peers(self.dbos, pool, pgids[self.ours.name])

    def dbos_peers(self, dbos: dbos_compare.DbosPeers, pool: Pool, ours_pgid: int) -> None:
        log(f"{pool.label}: DBOS, worker_concurrency {pool.concurrency}, alternating with ours")
        got = dbos.measure(self.ours, ours_pgid, pool, self.sizes, self.server)
        self.results["dbos"][pool.label] = got
        for name, side in got["sides"].items():
            rate = side["throughput"]["ratio"]["median"]
            p50 = side["sequential"]["call_p50_ratio"]["median"]
            log(f"{pool.label}: ours / {name}: throughput {rate:.2f}, sequential p50 {p50:.2f}")

    def b1(self, pool: Pool, pgids: dict[str, int]) -> None:
        sizes = self.sizes
        log(f"{pool.label}: B1, {sizes.repetitions} x {sizes.b1_calls} calls a side")
        got = b1_throughput.compare(
            self.ours,
            [*self.peers, *self.ablations],
            pgids,
            sizes.b1_calls,
            sizes.repetitions,
            server=self.server,
        )
        self.results["b1"][pool.label] = {"pool": pool.name, "concurrency": pool.concurrency, **got}
        if "bare_spaced_ratio" in got:
            log(f"{pool.label}: B1 like for like {quoted(got['bare_spaced_ratio'])}")
        others = "".join(
            f", {got[f'{name}_ratio']['median']:.2f} ({label})"
            for name, label in (("defaults", "Celery defaults"), ("bare_one", "one-task peer"))
            if f"{name}_ratio" in got
        )
        log(
            f"{pool.label}: B1 ratio {quoted(got['ratio'])} (fair peer){others}; others kept "
            f"{got['others_busy']['median']:.0%} of the cores busy"
        )

    def profile_workers(self, pool: Pool, pgids: dict[str, int]) -> None:
        from bench.suite.profiling import profile_worker

        out = self.args.out / f"profile-{pool.name}{pool.concurrency}"
        out.mkdir(parents=True, exist_ok=True)
        log(f"{pool.label}: py-spy on both workers")
        self.results.setdefault("profiles", {})[pool.label] = {
            side.name: profile_worker(side, pgids[side.name], self.sizes.b1_calls, out)
            for side in (self.ours, *self.peers, *self.ablations)
        }

    def b2(self, pool: Pool, *, first: bool) -> None:
        samples = self.sizes.b2_samples
        log(f"{pool.label}: B2, {samples} sequential calls a side")
        got = b2_latency.latencies(self.ours, self.peers, samples, self.sizes.repetitions)
        self.results["b2"][pool.label] = {"pool": pool.name, "concurrency": pool.concurrency, **got}
        log(f"{pool.label}: B2 submit p50 = {got['submit_over_ping_p50']:.1f} PINGs")
        if first:
            self.results["b2_parts"] = b2_latency.submit_parts(self.ours, samples)
            if self.args.profile:
                from bench.suite.profiling import profile_submit

                self.results["b2_profile"] = profile_submit(self.ours, samples, self.args.out)

    def b3(self) -> None:
        calls = self.sizes.b3_calls
        log(f"B3: commands of {calls} calls a side")
        self.results["b3"] = b3_commands.commands(self.args.redis_url, self.ours, self.bare, calls)

    def b5(self) -> None:
        """On workers of its own (``b5_reprocess.WORKERS``), none of the pools' up."""
        runs, per_run = self.sizes.b5_runs, self.sizes.b5_calls_per_run
        workers = f"{b5_reprocess.WORKERS} x {b5_reprocess.POOL.label}"
        log(f"B5: {runs:,} runs of {per_run} calls, reprocessed on {workers} (projections)")
        got = b5_reprocess.measure(
            self.ours.app,
            self.ours.store,
            self.settings,
            runs,
            per_run,
            self.sizes.b5_passes,
            self.args.out / "logs",
        )
        self.results["b5"] = got.as_dict()
        log(
            f"B5: {got.runs_per_s:,.0f} runs/s of facts from sealed projections, median of "
            f"{len(got.passes_s)} passes, {workers} ({got.failed} failed lines)"
        )
        # No later phase needs these records; B4 and B6 measure a store without them.
        self.ours.store.client.flushdb()
        ensure_scripts(self.ours.store)

    def b8(self, pool: Pool, ours: WorkerProcess) -> None:
        sizes = b8_turns.QUICK if self.args.quick else b8_turns.FULL
        processes = self.args.b8_processes
        label = pool.label if processes == 1 else f"{processes} processes x {pool.label}"
        log(f"B8: turns of {sizes['size']} calls against one by one, {label}")
        # The other processes of ours, for this phase only (the first is the pools' own).
        more = [
            partial(self._worker, self.ours, pool, f"{self.ours.name}-b8-{n}")
            for n in range(2, processes + 1)
        ]
        with running(*more) as others:
            pgids = (ours.pgid, *(process.pgid for process in others))
            got = b8_turns.measure(self.ours, **sizes, worker_pgids=pgids, server=self.server)
        self.results["b8"] = {"pool": pool.label, "processes": processes, **got}
        self.ours.store.client.flushdb()
        ensure_scripts(self.ours.store)
        submit, latency, rate = got["submit"], got["latency"], got["throughput"]
        log(
            f"B8: turn submit {submit['turn_submit_p50_ms']:.2f} ms vs one call "
            f"{submit['one_submit_p50_ms']:.2f} ms ({submit['ratio']:.2f}x, target <= 2); "
            f"a turn of {latency['size']} calls of a 50 ms tool {latency['turn_p50_ms']:.1f} ms "
            f"vs one {latency['one_p50_ms']:.1f} ms ({latency['ratio']:.2f}x, target <= "
            f"{b8_turns.LATENCY_TARGET}); calls/s as turns over one by one {rate['ratio']:.2f}x "
            f"(spread {rate['spread'][0]:.2f}-{rate['spread'][1]:.2f}), Redis CPU a call in "
            f"turns / one by one {rate['redis_cpu_ratio'] or float('nan'):.2f}"
        )

    def b9(self) -> None:
        b9 = b9_live_during_job  # its sizes, knobs and target
        sizes = b9.QUICK if self.args.quick else b9.FULL
        log(
            f"B9: {sizes.samples} sequential live calls a block, idle and during a full-speed "
            f"re-projection job on {sizes.runs * sizes.calls:,} records, x{sizes.repeat}"
        )
        got = b9.measure(self.args.redis_url, sizes, b9.Knobs(), self.args.out / "logs")
        self.results["b9"] = got
        # Its records are of the example tools, not the no-op: no phase reads them.
        flush_own_dbs(self.args.redis_url)
        ensure_scripts(self.ours.store)
        ratio = got["p50_ratio"]
        log(
            f"B9: live p50 during the job / idle {quoted(ratio)} (target <= {b9.TARGET:g}), "
            f"job {got['job_records_per_s']['median']:,.0f} records/s"
        )

    def b7(self, pool: Pool) -> None:
        sizes = self.sizes
        log(f"B7: {sizes.b7_calls} concurrent ainvoke calls on one event loop, {pool.label}")
        got = b7_async.measure(
            self.ours,
            sizes.b7_calls,
            sizes.b7_threads,
            sizes.b7_repetitions,
            sizes.b7_samples,
            levels=sizes.b7_stall_calls,
            runs=sizes.b7_runs,
            server=self.server,
        )
        self.results["b7"] = {"pool": pool.label, **got}
        # No later phase needs these calls.
        self.ours.store.client.flushdb()
        ensure_scripts(self.ours.store)
        for level in got.get("stalls", {}).get("levels", []):
            late = level["tick_lateness"]
            log(
                f"B7: {level['calls']} in flight: tick lateness p50 {late['p50_ms']:.2f} / p99 "
                f"{late['p99_ms']:.1f} / worst {late['max_ms']:.1f} ms, longest loop step "
                f"{level['longest_step_cpu_ms']:.1f} ms CPU"
            )
        stall = got["stall"]
        log(
            f"B7: worst tick lateness {stall['tick_lateness']['max_ms']:.1f} ms, longest "
            f"loop step {stall['longest_step_cpu_ms']:.1f} ms CPU, async/sync "
            f"{got['throughput']['ratio']['median']:.2f}"
        )


def chosen_sizes(args: argparse.Namespace) -> Sizes:
    sizes = QUICK if args.quick else FULL
    overrides = {
        "pools": args.pools,
        "b1_calls": args.calls,
        "repetitions": args.repetitions,
        "b5_runs": args.b5_runs,
        "b6_records": args.b6_records,
        "b7_runs": args.b7_runs,
        "b7_stall_calls": args.b7_levels,
    }
    return replace(sizes, **{k: v for k, v in overrides.items() if v is not None})


def measure(args: argparse.Namespace, sizes: Sizes, command: str) -> dict[str, Any]:
    document: dict[str, Any] = {
        "meta": machine(args.redis_url, command, quick=args.quick, sizes=sizes)
    }
    flush_own_dbs(args.redis_url)
    try:
        document["results"] = Bench(args, sizes).run()
    finally:
        flush_own_dbs(args.redis_url)
    return document


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.redis_aof is None:
        return _main(args, argv)
    # The server's files on the output's disk: an fsync there is a real one.
    server = RedisServer(
        args.out.resolve() / "redis-aof",
        "--appendonly",
        "yes",
        "--appendfsync",
        args.redis_aof,
        port=_free_port(),
        name=f"bench-aof-{args.redis_aof}",
    )
    server.start()
    log(f"redis-server with AOF, appendfsync {args.redis_aof}, on port {server.port}")
    try:
        args.redis_url = server.url.removesuffix("/0")
        return _main(args, argv)
    finally:
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)


def _main(args: argparse.Namespace, argv: list[str] | None) -> int:
    if not reachable(args.redis_url):
        print(f"bench: Redis is not reachable at {args.redis_url}", file=sys.stderr)
        return 2
    _interrupt_on_sigterm()
    sizes = chosen_sizes(args)
    command = " ".join(["python -m bench", *(sys.argv[1:] if argv is None else argv)])
    try:
        with exclusive(args.redis_url, args.lock_wait, lambda: log("waiting for another run")):
            if args.delay_ms is None:
                document = measure(args, sizes, command)
            else:
                with Distance(args.redis_url, args.delay_ms, args.out / "proxy.log") as distance:
                    args.proxy_url = distance.url
                    log(f"through the delay proxy, {args.delay_ms:g} ms each way: {distance.pings}")
                    document = measure(args, sizes, command)
                    document["meta"]["delay_proxy"] = distance.summary()
    except Busy as busy:
        print(f"bench: another benchmark run holds the lock {busy}", file=sys.stderr)
        return EXIT_BUSY
    except KeyboardInterrupt:
        log("interrupted; the workers are stopped")
        return 130
    document["meta"]["load_after"] = load()
    document["figures"] = figures(document["results"])
    paths = write_outputs(document, args.out)
    if args.keep is not None:
        args.keep.parent.mkdir(parents=True, exist_ok=True)
        args.keep.write_text(json.dumps(document, indent=1, default=str) + "\n")
        paths.append(args.keep)
    if args.json:
        print(json.dumps(document, indent=2, default=str))
    else:
        print_table(document)
    log("wrote " + ", ".join(str(path) for path in paths))
    return 0
