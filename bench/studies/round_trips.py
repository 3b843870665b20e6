"""``python -m bench.studies.round_trips``: the network round trips of one call, from
``submit`` to the outcome in the caller's hands, per leg, and which of them lie on the
critical path. Ours as the chain (``execute`` then ``project``, the default) and in one hop
(``--project-in-line``), against the bare two-task chain and the one-task call
(``bench.peers.bare``), each waited on as ``bench.suite.sides`` waits.

Every side gets its own counting proxies (``bench.rig.proxy``), one a leg: the caller's
connections to the store, the broker and the result backend, and its worker's to the same
three (six listening ports, one Redis server behind them). Calls go one at a time.

- **Counted** (delay 0): on each leg, the round trips (a command or a pipeline, then its
  reply) that end while the call runs, the wake-ups among them (a blocking ``BRPOP``'s reply
  or a Pub/Sub message: the server speaks when something happened), and those that end in
  the 50 ms after the outcome is in hand (acks, events: off the path by construction). The
  idle workers' own polling, counted for a second before, is taken off.
- **On the critical path**: the same calls with one leg at a time delayed ``--delay-ms`` each
  way (the others not), interleaved with calls on no delayed leg (after each change of
  delays, one call untimed); ``(p50 with the leg
  delayed - p50 without) / delay`` is the number of one-way trips over that leg the call
  waits for: 2 a round trip waited on, 1 a wake-up. A round trip counted but not waited for
  (sent in parallel, pipelined with another, or after the outcome) adds nothing.

Uses DBs 3-5 of the server like ``python -m bench`` (flushed before and after, under its lock).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.rig.proxy import DelayProxy, ProxyThread
from bench.rig.workers import Pool, WorkerProcess, running
from bench.studies.onehop import OneHop
from bench.suite.config import DEFAULT_REDIS_URL, bench_settings, parse_pools
from bench.suite.lock import exclusive
from bench.suite.meta import commit, load
from bench.suite.run import flush_own_dbs
from bench.suite.sides import CALL_TIMEOUT_S, Bare, BareOne, Ours, Side, call_ids
from tasks.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: The legs, "who.what": the caller's (``submit`` and the wait) or the worker's connections
#: to the store, the broker and the result backend.
LEGS = (
    "caller.store",
    "caller.broker",
    "caller.backend",
    "worker.store",
    "worker.broker",
    "worker.backend",
)
#: Settings field of each service.
FIELDS = {"store": "redis_url", "broker": "broker_url", "backend": "result_backend"}
#: The sides, in the table's order.
SIDE_NAMES = ("ours", "onehop", "bare", "bare_one")
#: Seconds after each call's outcome whose round trips are counted as "after".
AFTER_S = 0.05
#: Seconds of idle counting before the calls (the workers' own polling).
IDLE_S = 1.0


def _via(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@127.0.0.1:{port}" if auth else f"127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


@dataclass
class Legs:
    """A side's six proxies, by leg."""

    proxies: dict[str, DelayProxy] = field(default_factory=dict)


def _resolved(settings: Settings, service: str) -> str:
    if service == "store":
        return settings.store_url
    if service == "broker":
        return settings.broker_url or settings.store_url
    return settings.result_backend or settings.store_url


def _side_settings(base: Settings, legs: Legs, who: str) -> Settings:
    update = {
        name: _via(_resolved(base, service), legs.proxies[f"{who}.{service}"].port)
        for service, name in FIELDS.items()
    }
    return base.model_copy(update=update)


@dataclass
class Rig:
    """The sides, their proxies and their workers' settings."""

    sides: dict[str, Side]
    legs: dict[str, Legs]
    worker_settings: dict[str, Settings]
    proxies: ProxyThread

    def set_delay(self, side: str, leg: str | None, delay_s: float) -> None:
        """``delay_s`` each way on ``leg`` of ``side`` (every leg: ``"all"``), 0 on the others."""

        def apply() -> None:
            for name, proxy in self.legs[side].proxies.items():
                proxy.delay_s = delay_s if leg in (name, "all") else 0.0

        self.proxies.call(apply)

    def counting(self, side: str, on: bool) -> None:
        def apply() -> None:
            for proxy in self.legs[side].proxies.values():
                proxy.count = on
                proxy.tally.clear()

        self.proxies.call(apply)


@contextmanager
def rig(url: str, pool: Pool, out: Path) -> Iterator[Rig]:
    """Every side with its proxies and its worker, up until the block ends."""
    host_port = urlsplit(url)
    upstream = (host_port.hostname or "127.0.0.1", host_port.port or 6379)
    chain = bench_settings(url, project_in_line=False)
    in_line = bench_settings(url, project_in_line=True)
    with ExitStack() as stack:
        proxies = stack.enter_context(ProxyThread())
        legs = {
            side: Legs(
                {leg: proxies.add(DelayProxy(upstream, name=f"{side}.{leg}")) for leg in LEGS}
            )
            for side in SIDE_NAMES
        }
        callers = {
            side: _side_settings(in_line if side == "onehop" else chain, legs[side], "caller")
            for side in SIDE_NAMES
        }
        workers = {
            side: _side_settings(in_line if side == "onehop" else chain, legs[side], "worker")
            for side in SIDE_NAMES
        }
        sides: dict[str, Side] = {
            "ours": Ours(callers["ours"]),
            "onehop": OneHop(callers["onehop"]),
            "bare": Bare(callers["bare"]),
            "bare_one": BareOne(callers["bare_one"]),
        }

        def start(name: str) -> WorkerProcess:
            side = sides[name]
            return WorkerProcess(
                module=side.module,
                name=side.name,
                app=side.app,
                settings=workers[name],
                pool=pool,
                queues=side.queues,
                log_dir=out / "logs",
            )

        stack.enter_context(running(*(partial(start, name) for name in SIDE_NAMES)))
        yield Rig(sides, legs, workers, proxies)


def _signature(commands: list[str]) -> str:
    """A round trip's commands, e.g. ``EVALSHA`` or ``MULTI+LPUSH+EXEC``."""
    if not commands:
        return "?"
    if len(commands) > 4:
        return f"{commands[0]}+...({len(commands)})"
    return "+".join(commands)


def _settled(side: Side) -> None:
    """Waits until the task-sent events ``side`` publishes behind its sends (ours: off the
    caller's path, from a thread of their own) are out: they are the call's round trips,
    and on a busy machine that thread may publish after the call's outcome."""
    dispatcher = getattr(getattr(side, "boundary", None), "dispatcher", None)
    sent_events = getattr(dispatcher, "sent_events", None)
    if sent_events is not None:
        sent_events.flush(CALL_TIMEOUT_S)


def count(rig: Rig, side_name: str, calls: int) -> dict[str, Any]:
    """Round trips per call on each leg of ``side_name``, one call at a time."""
    side = rig.sides[side_name]
    rig.set_delay(side_name, None, 0.0)
    rig.counting(side_name, True)
    time.sleep(IDLE_S)
    idle_end = time.monotonic()
    windows = []
    for run_id, call_id in call_ids(f"rt{side_name}", calls):
        began = time.monotonic()
        side.invoke(run_id, call_id)
        _settled(side)
        ended = time.monotonic()
        windows.append((began, ended))
        time.sleep(AFTER_S)
    # The tallies are the proxies' loop's: copied on it.
    tallies = rig.proxies.call(
        lambda: {
            leg: (list(proxy.tally.exchanges), list(proxy.tally.pushes))
            for leg, proxy in rig.legs[side_name].proxies.items()
        }
    )
    rig.counting(side_name, False)
    idle_began = idle_end - IDLE_S
    in_calls = sum(end - start for start, end in windows)

    def where(at: float) -> str | None:
        if at < idle_end:
            return "idle" if at >= idle_began else None
        for start, end in windows:
            if start <= at <= end:
                return "during"
            if end < at <= end + AFTER_S:
                return "after"
        return None

    legs: dict[str, Any] = {}
    for leg, (exchanges, pushes) in tallies.items():
        seen: Counter[str] = Counter()
        names: Counter[str] = Counter()
        for exchange in exchanges:
            assert exchange.replied is not None
            place = where(exchange.replied)
            if place is None:
                continue
            kind = "wakeups" if exchange.blocking else "round_trips"
            seen[f"{place}.{kind}"] += 1
            if place == "during":
                names[_signature(exchange.commands)] += 1
        for push in pushes:
            place = where(push.at)
            if place is not None:
                seen[f"{place}.wakeups"] += 1
                if place == "during":
                    names["(push)"] += 1

        def per_call(place: str, kind: str, seen: Counter[str] = seen) -> float:
            background = seen[f"idle.{kind}"] / IDLE_S
            seconds = in_calls if place == "during" else AFTER_S * calls
            return max(0.0, (seen[f"{place}.{kind}"] - background * seconds) / calls)

        legs[leg] = {
            "round_trips": per_call("during", "round_trips"),
            "wakeups": per_call("during", "wakeups"),
            "after": per_call("after", "round_trips") + per_call("after", "wakeups"),
            "idle_per_s": (seen["idle.round_trips"] + seen["idle.wakeups"]) / IDLE_S,
            "commands": {name: n / calls for name, n in names.most_common()},
        }
    return {"calls": calls, "legs": legs}


def critical(rig: Rig, side_name: str, samples: int, delay_s: float) -> dict[str, Any]:
    """One-way trips waited for on each leg: ``(p50 delayed - p50 not) / delay``."""
    side = rig.sides[side_name]
    cases: list[str | None] = [None, *LEGS, "all"]
    times: dict[str, list[float]] = {str(case): [] for case in cases}
    ids = call_ids(f"rtc{side_name}", 2 * samples * len(cases))
    for n in range(samples):
        # Each case follows each other in turn: a rotation a sample.
        shift = n % len(cases)
        for case in cases[shift:] + cases[:shift]:
            rig.set_delay(side_name, case, delay_s)
            # Untimed: a call begun under the last case's delays may leave work behind (a
            # late unsubscription, a message still queued) that this case's first call
            # would pay for.
            side.invoke(*next(ids))
            began = time.perf_counter()
            side.invoke(*next(ids))
            times[str(case)].append(time.perf_counter() - began)
    rig.set_delay(side_name, None, 0.0)
    p50 = {case: statistics.median(values) for case, values in times.items()}
    base = p50["None"]
    return {
        "samples": samples,
        "delay_ms": delay_s * 1000,
        "p50_ms": {case: value * 1000 for case, value in p50.items()},
        "trips": {case: (value - base) / delay_s for case, value in p50.items() if case != "None"},
    }


def measure(
    url: str, pool: Pool, calls: int, samples: int, delay_s: float, out: Path
) -> dict[str, Any]:
    got: dict[str, Any] = {"pool": pool.label, "sides": {}}
    with rig(url, pool, out) as built:
        for side in built.sides.values():
            for run_id, call_id in call_ids(f"rtw{side.name}", 10):
                side.invoke(run_id, call_id)
        for name in SIDE_NAMES:
            entry = {"counted": count(built, name, calls)}
            if samples:
                entry["critical"] = critical(built, name, samples, delay_s)
            got["sides"][name] = entry
    return got


#: The table's names of the sides.
TITLES = {
    "ours": "ours, chain (default)",
    "onehop": "ours, one hop (`--project-in-line`)",
    "bare": "bare two-task chain",
    "bare_one": "one-task call",
}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _cell(counted: list[dict[str, Any]], waited: list[float]) -> str:
    """``**waited** / round trips +wake-ups (after)``: medians over the runs, the waited
    trips' spread (min-max) when there are several runs."""
    round_trips = _median([leg["round_trips"] for leg in counted])
    wakeups = _median([leg["wakeups"] for leg in counted])
    after = _median([leg["after"] for leg in counted])
    text = f"{round_trips:.1f}"
    if wakeups >= 0.05:
        text += f" +{wakeups:.1f}w"
    if after >= 0.05:
        text += f" ({after:.1f})"
    if waited:
        low, high = min(waited), max(waited)
        spread = f" ({low:.1f} to {high:.1f})" if len(waited) > 1 else ""
        text = f"**{_median(waited):.1f}**{spread} / {text}"
    return text


def table(documents: list[dict[str, Any]]) -> str:
    """The Markdown table of the runs' first pool: medians over the runs."""
    pools = [document["pools"][0] for document in documents]
    lines = [
        "| side | " + " | ".join(LEGS) + " | waited for, all legs delayed |",
        "|---" * (len(LEGS) + 2) + "|",
    ]
    for name in SIDE_NAMES:
        sides = [pool["sides"][name] for pool in pools]
        trips = [side["critical"]["trips"] for side in sides if "critical" in side]
        cells = [
            _cell(
                [side["counted"]["legs"][leg] for side in sides],
                [trip[leg] for trip in trips],
            )
            for leg in LEGS
        ]
        every = [trip["all"] for trip in trips]
        total = "-"
        if every:
            total = f"**{_median(every):.1f}** ({min(every):.1f} to {max(every):.1f})"
        lines.append(f"| {TITLES[name]} | " + " | ".join(cells) + f" | {total} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.studies.round_trips", description=__doc__
    )
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--pools", type=parse_pools, default=(Pool("threads", 8),))
    parser.add_argument("--calls", type=int, default=50, help="calls counted a side")
    parser.add_argument(
        "--samples",
        type=int,
        default=40,
        help="calls a side and leg for the critical path (0: count only)",
    )
    parser.add_argument(
        "--delay-ms", type=float, default=2.0, help="delay each way on the leg under test"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "round_trips")
    parser.add_argument("--lock-wait", type=float, default=900.0)
    parser.add_argument("--markdown", action="store_true", help="print the table, not JSON")
    parser.add_argument(
        "--table",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="measure nothing: print the table of these runs' JSON (medians over them)",
    )
    args = parser.parse_args(argv)
    if args.table:
        print(table([json.loads(path.read_text()) for path in args.table]))
        return 0
    given = sys.argv[1:] if argv is None else argv
    document: dict[str, Any] = {
        "command": " ".join(["python -m bench.studies.round_trips", *given])
    }
    document |= {"commit": commit(), "load_before": load()}
    with exclusive(args.redis_url, args.lock_wait):
        flush_own_dbs(args.redis_url)
        try:
            document["pools"] = [
                measure(
                    args.redis_url,
                    pool,
                    args.calls,
                    args.samples,
                    args.delay_ms / 1000,
                    args.out,
                )
                for pool in args.pools
            ]
        finally:
            flush_own_dbs(args.redis_url)
    document["load_after"] = load()
    if args.markdown:
        print(table([document]))
    else:
        print(json.dumps(document, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
