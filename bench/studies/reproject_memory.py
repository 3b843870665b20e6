"""Issue 40, item 6: the memory of the reproject CLI and of each worker, from a small store to
a large one. The figure is flatness: the same peaks at 10,000 and at 1,000,000 records.

For each store size (``--records``, runs of ``--calls`` sealed ``search_docs`` calls with their
raw responses kept, written by the store's own scripts), on the bench's DBs of one Redis:

- ``sealed``: ``tool-boundary reproject --all --out /dev/null`` (facts from the sealed
  projections, queue ``projections``);
- ``current``: ``tool-boundary reproject --projectors current --all --out /dev/null`` (a dry-run
  job on ``reprojections``, which the command follows to its end).

Each command is its own process: its peak RSS is the kernel's ``ru_maxrss`` of that child.
While it runs, the Redis server's client list is read every ``SAMPLE_S``: the largest output
buffer any client had (``omem``; a pub/sub connection nobody reads grows there) is the
command's ``redis_out_buffer_peak_mb``, server-wide, so a quiet server's. Each
worker (``--processes`` of ``--pool`` per queue, started for the size and stopped after it) is
read from ``/proc``: the peak RSS (``VmHWM``) of every process of its group, after it answered
its first ping (``ready``) and after both commands (``peak``).

``python -m bench.studies.reproject_memory --redis-url redis://127.0.0.1:6379
[--records 10000,1000000] [--calls 10] [--json] [--out DIR]``. It flushes the bench's DBs of
that server at each size and at the end (asynchronously: a million records outlast a socket
timeout), under the bench's lock.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import redis

from bench.rig.workers import Pool, settings_env
from bench.studies.b8_reproject import workers
from bench.suite.config import bench_settings
from bench.suite.fixtures import EXAMPLE_TOOLS, ensure_scripts, write_rag_runs
from bench.suite.lock import exclusive
from boundary import RedisCanonicalStore
from tasks.settings import Settings
from tasks.wiring.app import PROJECTIONS_QUEUE, REPROJECTIONS_QUEUE

#: The commands measured, by name: the arguments after ``tool-boundary``.
COMMANDS = {
    "sealed": ("reproject", "--all", "--out", os.devnull, "--timeout", "600"),
    "current": (
        "reproject",
        "--projectors",
        "current",
        "--all",
        "--out",
        os.devnull,
        "--timeout",
        "600",
    ),
}


def group_peaks_mb(pgid: int) -> list[float]:
    """``VmHWM`` of every live process in process group ``pgid``, MB, largest first."""
    peaks = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Fields after the command's closing parenthesis: state ppid pgrp ...
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            status = (entry / "status").read_text()
        except (OSError, IndexError, ValueError):
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) / 1024)
    return sorted(peaks, reverse=True)


#: Seconds between two reads of the server's client list while a command runs.
SAMPLE_S = 0.1


class OutputBuffers:
    """The largest output buffer (``omem``, bytes) any client of ``server`` had, read every
    ``SAMPLE_S`` on a thread of its own between ``start`` and ``stop``."""

    def __init__(self, server: redis.Redis) -> None:
        self.server = server
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            try:
                clients = self.server.client_list()
            except redis.RedisError:
                clients = []
            self.peak = max([self.peak, *(int(c.get("omem", 0)) for c in clients)])
            if self._stop.wait(SAMPLE_S):
                return

    def start(self) -> OutputBuffers:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def run_command(env: dict[str, str], args: tuple[str, ...], server: redis.Redis) -> dict[str, Any]:
    """Runs ``tool-boundary args`` to its end: exit code, seconds, peak RSS (MB), and the
    largest output buffer of a client of ``server`` meanwhile (MB)."""
    buffers = OutputBuffers(server).start()
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tasks.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - began
    return {
        "exit": proc.returncode,
        "seconds": round(seconds, 2),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "redis_out_buffer_peak_mb": round(buffers.stop() / 2**20, 2),
        "stderr_tail": stderr.decode(errors="replace")[-300:] if proc.returncode else "",
    }


def measure_size(
    settings: Settings, records: int, calls: int, pool: Pool, processes: int, log_dir: Path
) -> dict[str, Any]:
    store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=settings.ttl_s)
    for url in (settings.store_url, settings.broker, settings.backend):
        RedisCanonicalStore.from_url(url).client.flushdb(asynchronous=True)
    ensure_scripts(store)
    runs = records // calls
    write_s = write_rag_runs(store, runs, calls)
    print(f"memory: wrote {runs:,} runs of {calls} calls in {write_s:.1f}s", file=sys.stderr)
    env = settings_env(settings)
    result: dict[str, Any] = {"records": runs * calls, "runs": runs, "write_s": round(write_s, 1)}
    queues = (PROJECTIONS_QUEUE, REPROJECTIONS_QUEUE)
    with (
        workers(settings, queues[0], pool, processes, log_dir) as first,
        workers(settings, queues[1], pool, processes, log_dir) as second,
    ):
        started = first + second
        result["workers_ready_mb"] = {w.name: group_peaks_mb(w.pgid) for w in started}
        for name, args in COMMANDS.items():
            result[name] = run_command(env, args, store.client)
            print(f"memory: {records:,} {name}: {result[name]}", file=sys.stderr)
        result["workers_peak_mb"] = {w.name: group_peaks_mb(w.pgid) for w in started}
    return result


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| records | write s | CLI sealed: max RSS MB (s) | CLI current: max RSS MB (s) "
        "| Redis output buffer peak, MB (sealed / current) "
        "| workers ready, MB | workers peak, MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:

        def peaks(by_worker: dict[str, list[float]]) -> str:
            return ", ".join(f"{max(p):.0f}" for p in by_worker.values() if p)

        rows.append(
            f"| {r['records']:,} | {r['write_s']} "
            f"| {r['sealed']['max_rss_mb']} ({r['sealed']['seconds']}) "
            f"| {r['current']['max_rss_mb']} ({r['current']['seconds']}) "
            f"| {r['sealed']['redis_out_buffer_peak_mb']} "
            f"/ {r['current']['redis_out_buffer_peak_mb']} "
            f"| {peaks(r['workers_ready_mb'])} | {peaks(r['workers_peak_mb'])} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.studies.reproject_memory",
        description="Peak memory of the reproject CLI and of each worker at two store sizes.",
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument(
        "--records", default="10000,1000000", help="store sizes, comma-separated (records)"
    )
    parser.add_argument("--calls", type=int, default=10, help="calls per run")
    parser.add_argument("--processes", type=int, default=2, help="worker processes per queue")
    parser.add_argument("--pool", default="threads:4", help="each worker's pool, NAME:N")
    parser.add_argument("--out", type=Path, default=Path("/tmp/reproject-memory"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--lock-wait", type=float, default=600.0, help="seconds to wait for another bench's DBs"
    )
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.records.split(",") if s.strip()]
    except ValueError:
        parser.error("--records takes whole numbers, comma-separated")
    if not sizes or min(sizes) < args.calls:
        parser.error(f"--records: each size must be at least --calls ({args.calls})")
    name, _, concurrency = args.pool.partition(":")
    pool = Pool(name, int(concurrency or 1))
    settings = bench_settings(args.redis_url).model_copy(update={"tools": EXAMPLE_TOOLS})
    args.out.mkdir(parents=True, exist_ok=True)
    with exclusive(args.redis_url, args.lock_wait):
        try:
            results = [
                measure_size(settings, n, args.calls, pool, args.processes, args.out / "logs")
                for n in sizes
            ]
        finally:
            for url in (settings.store_url, settings.broker, settings.backend):
                RedisCanonicalStore.from_url(url).client.flushdb(asynchronous=True)
    text = json.dumps(results, indent=2, sort_keys=True)
    (args.out / "reproject_memory.json").write_text(text + "\n")
    print(text if args.json else table(results))
    failed = [r for r in results for n in COMMANDS if r[n]["exit"] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
