"""The tool ``bench/mcp_restart.py`` calls: read-only, sleeps as long as asked, then answers.

Workers load it with ``TOOL_BOUNDARY_TOOLS=bench.mcp_tools:registry``.
"""

from __future__ import annotations

import time
from typing import Any

from boundary import EvidenceStatus, Projection, ToolRegistry, ToolSpec

#: The tool's name.
SLEEP = "sleep"


def sleep(arguments: dict[str, Any]) -> dict[str, Any]:
    seconds = float(arguments.get("seconds", 10.0))
    time.sleep(seconds)
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
        )
    ]
)
