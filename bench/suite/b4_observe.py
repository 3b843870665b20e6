"""B4: ``ToolBoundary.observe`` on a 100-call READY run: round trips and time, against the
least any reader could do, 100 HGETALLs in one pipeline."""

from __future__ import annotations

import time
from typing import Any

from bench.reports.stats import ms, percentile
from bench.suite.counting import COUNTS
from bench.suite.fixtures import write_sealed
from bench.suite.sides import Ours
from boundary import CanonicalKey
from boundary.store import keys as store_keys

#: Calls of the observed run.
RUN_CALLS = 100


def observe(ours: Ours, samples: int) -> dict[str, Any]:
    run_id = "b4-run"
    calls = [CanonicalKey(run_id=run_id, tool_call_id=f"call_{n}") for n in range(RUN_CALLS)]
    write_sealed(ours.store, calls)
    client = ours.store.client
    record_keys = [store_keys.record_key(key) for key in calls]

    def pipelined() -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for record_key in record_keys:
            pipe.hgetall(record_key)
        return pipe.execute()

    facts = ours.boundary.observe(run_id)
    if len(facts.facts) != RUN_CALLS:
        raise RuntimeError(f"observe found {len(facts.facts)} facts, not {RUN_CALLS}")
    pipelined()
    observe_s: list[float] = []
    pipeline_s: list[float] = []
    ping_s: list[float] = []
    round_trips: list[int] = []
    commands: list[int] = []
    for _ in range(samples):
        COUNTS.reset()
        began = time.perf_counter()
        ours.boundary.observe(run_id)
        observe_s.append(time.perf_counter() - began)
        round_trips.append(COUNTS.round_trips)
        commands.append(COUNTS.replies)
        began = time.perf_counter()
        pipelined()
        pipeline_s.append(time.perf_counter() - began)
        began = time.perf_counter()
        client.ping()
        ping_s.append(time.perf_counter() - began)
    observe_p50, pipeline_p50 = percentile(observe_s, 50), percentile(pipeline_s, 50)
    return {
        "run_calls": RUN_CALLS,
        "samples": samples,
        "round_trips": max(round_trips),
        "commands": max(commands),
        "observe_p50_ms": ms(observe_p50),
        "observe_p99_ms": ms(percentile(observe_s, 99)),
        "pipeline_p50_ms": ms(pipeline_p50),
        "ping_p50_ms": ms(percentile(ping_s, 50)),
        "time_over_pipeline": observe_p50 / pipeline_p50,
    }
