"""``python -m bench.studies.chaos --minutes N --seed S [--json] [--sentinel]``: a chaos run.

Starts its own redis-servers (store and broker with AOF, a ledger no fault touches; with
``--sentinel`` the store and the result backend behind a Sentinel set), a threads worker, a
prefork worker and beat under a supervisor, a mixed load of sync and async callers, and
injects faults in an order the seed fixes. Then it lets the system settle and reports.
Exit status 0 when nothing was lost or stuck, no worker exited unplanned and no slot is held.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.rig.servers import PortRange
from bench.studies.chaos.report import summary
from bench.studies.chaos.run import SETTLE_S, chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.studies.chaos", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--minutes", type=float, required=True, help="minutes of load and faults")
    parser.add_argument("--seed", type=int, required=True, help="fixes the order of the faults")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--sentinel", action="store_true", help="the store behind Sentinel")
    parser.add_argument(
        "--min-replicas",
        type=int,
        default=0,
        help="with --sentinel: the data servers' min-replicas-to-write (0: off)",
    )
    parser.add_argument("--ports", default="22000-22099", help="FIRST-LAST for the servers")
    parser.add_argument("--dir", default=None, help="servers' data, logs and report.json")
    parser.add_argument("--settle-s", type=float, default=SETTLE_S, help="bound of the settling")
    args = parser.parse_args(argv)
    first, last = (int(part) for part in args.ports.split("-"))
    directory = Path(args.dir or tempfile.mkdtemp(prefix="chaos-"))
    found = chaos(
        args.minutes,
        args.seed,
        directory,
        PortRange(first, last),
        sentinel=args.sentinel,
        min_replicas=args.min_replicas,
        settle_s=args.settle_s,
    )
    line = summary(found, args.seed, args.minutes)
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        print()
        print(line, file=sys.stderr)
    else:
        print(line)
        print(f"report: {directory / 'report.json'}")
    healthy = not (
        found["lost"]
        or found["stuck"]
        or found["unplanned_worker_exits"]
        or found["slots_left_held"]
    )
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
