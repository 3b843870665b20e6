"""The telemetry a call costs, without a worker: every hook one call passes (the submit span,
the header injection, both worker steps' spans and their figures), run in a loop in this
process with telemetry off, on the no-op API and on the SDK exporting to nothing. On a shared
machine this varies far less than B1's throughput; divide by B1's CPU per call for the share.

    python -m bench.studies.telemetry_hooks [--calls 20000]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from bench.peers.tools import NOOP
from bench.peers.tools import registry as noop_registry
from bench.studies.otel_sdk import sdk_providers
from boundary import (
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
    ToolRegistry,
    telemetry,
)

KEY = CanonicalKey(run_id="hooks-run", tool_call_id="call_1")
RUN = RunContext(run_id=KEY.run_id, authorized_tools=frozenset({NOOP}))
ENVELOPE = ToolCallEnvelope(
    run_id=KEY.run_id, tool_call_id=KEY.tool_call_id, tool_name=NOOP, arguments={}
)
NOW = datetime.now(UTC)
RECORD = CanonicalRecord(
    run_id=KEY.run_id,
    tool_call_id=KEY.tool_call_id,
    tool_name=NOOP,
    status=InvocationStatus.PROJECTING,
    request="{}",
    seq=1,
    created_at=NOW,
    updated_at=NOW,
)
OUTCOME = ToolOutcome(
    tool_call_id=KEY.tool_call_id,
    status=InvocationStatus.READY,
    evidence_status=EvidenceStatus.EVIDENCE_FOUND,
)


@dataclass
class FakeBoundary:
    registry: ToolRegistry


@telemetry.traced_submit
def submit(boundary: FakeBoundary, envelope: ToolCallEnvelope, run: RunContext) -> Submission:
    headers = telemetry.trace_headers()  # what the dispatcher does
    carrier.clear()
    carrier.update(headers)
    return Submission(key=KEY, accepted=True)


carrier: dict[str, str] = {}


def one_call(boundary: FakeBoundary) -> None:
    submit(boundary, ENVELOPE, RUN)
    with telemetry.worker_step(telemetry.EXECUTE, KEY, carrier):
        telemetry.step_record(RECORD)
        telemetry.tool_starts(RECORD)
        telemetry.stored()
    with telemetry.worker_step(telemetry.PROJECT, KEY, carrier) as step:
        telemetry.step_record(RECORD)
        telemetry.sealed(OUTCOME)
        step.outcome(OUTCOME)


def per_call_us(calls: int) -> float:
    boundary = FakeBoundary(noop_registry)
    for _ in range(min(calls, 1000)):
        one_call(boundary)
    began = time.process_time()
    for _ in range(calls):
        one_call(boundary)
    return (time.process_time() - began) * 1e6 / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.studies.telemetry_hooks", description=__doc__
    )
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    tracer_provider, meter_provider = sdk_providers()
    modes = {
        "off": {"enabled": False},
        "noop": {},
        "sdk": {"tracer_provider": tracer_provider, "meter_provider": meter_provider},
    }
    out: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(args.repetitions):
        for mode, options in modes.items():
            telemetry.configure(**options)  # type: ignore[arg-type]
            out[mode].append(per_call_us(args.calls))
    telemetry.configure()
    print(json.dumps({"calls": args.calls, "cpu_us_per_call": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
