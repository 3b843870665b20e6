"""The tool ``bench/studies/mcp_restart.py`` calls: read-only, sleeps as long as asked, then
answers.

Workers load it with ``TOOL_BOUNDARY_TOOLS=bench.studies.mcp_tools:registry``.
"""

from __future__ import annotations

import time
from typing import Any

from boundary import EvidenceStatus, Projection, ToolRegistry, ToolSpec, heartbeat

#: The tool's name.
SLEEP = "sleep"
#: A tool that heartbeats every 0.2 s (so a cancel stops it at its next beat) and, on its way
#: out, writes the epoch time it stopped to ``exit_file`` when given
#: (``bench.studies.mcp_clients``).
BEAT = "beat"


def sleep(arguments: dict[str, Any]) -> dict[str, Any]:
    seconds = float(arguments.get("seconds", 10.0))
    time.sleep(seconds)
    return {"slept_s": seconds}


def beat(arguments: dict[str, Any]) -> dict[str, Any]:
    seconds = float(arguments.get("seconds", 10.0))
    steps = max(1, int(seconds / 0.2))
    exit_file = arguments.get("exit_file")
    try:
        for i in range(steps):
            heartbeat(progress=i / steps, message=f"step {i} of {steps}")
            time.sleep(0.2)
    finally:
        if exit_file:
            with open(exit_file, "w") as out:
                out.write(repr(time.time()))
    return {"slept_s": seconds}


class PassThrough:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result=raw)


registry = ToolRegistry(
    [
        ToolSpec(
            name=SLEEP,
            executor=sleep,
            projector=PassThrough(),
            read_only=True,
            timeout_s=120,
            description="Sleeps for the given seconds, then answers.",
            input_schema={
                "type": "object",
                "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 100}},
            },
        ),
        ToolSpec(
            name=BEAT,
            executor=beat,
            projector=PassThrough(),
            read_only=True,
            timeout_s=120,
            heartbeat_timeout_s=10,
            description="Heartbeats every 0.2 s for the given seconds, then answers.",
            input_schema={
                "type": "object",
                "properties": {
                    "seconds": {"type": "number", "minimum": 0, "maximum": 100},
                    "exit_file": {"type": "string"},
                },
            },
        ),
    ]
)
