"""The reaper's first pass over a store of many sealed records with 1,000 calls due (issue 24:
"the reaper's first pass over 1,000,000 records with 1,000 pending takes under 1 s").

``python -m bench.studies.reaper_first_pass --records 1000000 --redis-url redis://127.0.0.1:6401/7``

Writes ``--records`` sealed calls (runs of 10, a 256-byte raw response each) and 1,000
PROJECTING calls past their reap time (100 runs of 10) through the store's own scripts
(``bench.suite.fixtures``, as B6 at scale), then times on one thread: the reaper's search
(``store.due_pending``), a whole ``boundary.reaper.reap_once`` pass (the search again, then each
due call decided and sealed WORKER_LOST: two round trips per call), and the next pass. Prints
one JSON line. The DB must be empty (it is refused otherwise) and is flushed afterwards.
About 1.5 GB of Redis memory per million records.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.suite.b6_scale import keys_of_runs
from bench.suite.fixtures import write_pending, write_sealed
from boundary import RedisCanonicalStore
from boundary.reaper import reap_once
from boundary.store import keys

#: Runs of 10 PROJECTING calls each: 1,000 calls due.
PENDING_RUNS = 100


def _timed(action: Any) -> tuple[float, Any]:
    began = time.perf_counter()
    value = action()
    return time.perf_counter() - began, value


def measure(store: RedisCanonicalStore, records: int) -> dict[str, Any]:
    client = store.client
    write_s, written = _timed(lambda: write_sealed(store, keys_of_runs("rfp-run", records // 10)))
    overdue = datetime.now(UTC) - timedelta(seconds=1)
    pending = write_pending(store, keys_of_runs("rfp-stuck", PENDING_RUNS), deadline=overdue)
    facts: dict[str, Any] = {
        "records": written,
        "pending": pending,
        "keys": client.dbsize(),
        "pending_runs_indexed": client.zcard(keys.PENDING_RUNS),
        "write_s": round(write_s, 1),
        "used_memory_mb": round(int(client.info("memory")["used_memory"]) / 2**20),
    }
    facts["due_search_s"], due = _timed(lambda: store.due_pending(limit=1000))
    facts["due_found"] = len(due)

    def one_pass() -> Any:
        return reap_once(store, lambda key: None, retry_after_s=60, max_reprojections=2)

    facts["first_pass_s"], first = _timed(one_pass)
    facts["first_pass"] = first.as_dict()
    facts["next_pass_s"], again = _timed(one_pass)
    facts["next_pass"] = again.as_dict()
    with open("/proc/loadavg", encoding="ascii") as load:
        facts["load"] = load.read().split()[:3]
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--redis-url", required=True, help="an empty DB of its own")
    args = parser.parse_args()
    store = RedisCanonicalStore.from_url(args.redis_url, ttl_s=3600, socket_timeout=120)
    if store.client.dbsize():
        raise SystemExit(f"{args.redis_url} is not empty: give the benchmark a DB of its own")
    try:
        print(json.dumps(measure(store, args.records)), flush=True)
    finally:
        store.client.flushdb(asynchronous=True)


if __name__ == "__main__":
    main()
