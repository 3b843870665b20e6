"""What ``input_schema`` validation adds to preflight: ``python -m
bench.studies.schema_validation``.

Preflight (pure, no I/O) of the same ``search_docs`` call, once with the example tool's real
schema and once with the same spec without a schema, interleaved round by round so the
machine's noise hits both sides alike; the added cost is the difference of the medians, and
the ratio is with-schema over without. A refused call (a value over the schema's maximum) is
timed too: the full error tree is built only for a failure. ``check_only``/``refusal_only``
time the spec's compiled validator alone, the least noisy figure of what a call pays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from boundary import Limits, RunContext, ToolCallEnvelope, ToolRegistry, ToolSpec
from boundary.preflight import preflight
from tasks.demo.tools import registry as example_registry

#: Calls per timed round, and rounds per side.
CALLS = 2_000
ROUNDS = 15


def _sides() -> dict[str, Callable[[], Any]]:
    spec = example_registry.get("search_docs")
    assert spec is not None
    with_schema = ToolRegistry([spec])
    bare = spec.model_dump(exclude={"input_schema"})
    without = ToolRegistry([ToolSpec(**bare)])
    run = RunContext(run_id="bench", authorized_tools=frozenset({"search_docs"}))
    limits = Limits()

    def envelope(arguments: dict[str, Any]) -> ToolCallEnvelope:
        return ToolCallEnvelope(
            run_id="bench", tool_call_id="call_1", tool_name="search_docs", arguments=arguments
        )

    good_arguments = {"query": "upstream timeout retries", "limit": 5}
    bad_arguments = {"query": "upstream timeout retries", "limit": 500}
    good, bad = envelope(good_arguments), envelope(bad_arguments)
    return {
        "no_schema": lambda: preflight(good, run, without, limits),
        "schema": lambda: preflight(good, run, with_schema, limits),
        "schema_refused": lambda: preflight(bad, run, with_schema, limits),
        # The schema check alone, as preflight runs it (the compiled validator of the spec).
        "check_only": lambda: spec.schema_violation(good_arguments),
        "refusal_only": lambda: spec.schema_violation(bad_arguments),
    }


def measure(calls: int = CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    """Median µs per preflight of each side, the added µs and the ratio."""
    sides = _sides()
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(rounds):
        order = list(sides) if index % 2 == 0 else list(reversed(sides))
        for name in order:
            call = sides[name]
            started = time.perf_counter()
            for _ in range(calls):
                call()
            samples[name].append((time.perf_counter() - started) / calls * 1e6)
    median = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "us_per_preflight": {name: round(value, 2) for name, value in median.items()},
        "schema_added_us": round(median["schema"] - median["no_schema"], 2),
        "schema_ratio": round(median["schema"] / median["no_schema"], 3),
        "refused_added_us": round(median["schema_refused"] - median["no_schema"], 2),
        "check_only_us": round(median["check_only"], 2),
        "refusal_only_us": round(median["refusal_only"], 2),
        "calls": calls,
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    print(json.dumps(measure(args.calls, args.rounds), indent=2))


if __name__ == "__main__":
    main()
