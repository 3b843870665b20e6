"""The no-op tool the benchmark calls: read-only, answers at once, projects to a tiny result.

Workers load it with ``TOOL_BOUNDARY_TOOLS=bench.peers.tools:registry``.
"""

from __future__ import annotations

import time
from typing import Any

from boundary import EvidenceStatus, Projection, ToolRegistry, ToolSpec

#: The tool's name in the registry and in every benchmark call.
NOOP = "noop"
#: What the no-op tool answers (its raw response).
RAW: dict[str, Any] = {"ok": True}
#: A tool that sleeps ``SLEEP_S`` then answers as the no-op does: a turn's latency (B8).
SLEEP = "sleep50"
SLEEP_S = 0.05


def noop(arguments: dict[str, Any]) -> dict[str, Any]:
    return RAW


def sleep50(arguments: dict[str, Any]) -> dict[str, Any]:
    time.sleep(SLEEP_S)
    return RAW


class NoopProjector:
    """Passes the tiny raw response through as the agent result."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result=raw)


registry = ToolRegistry(
    [
        ToolSpec(name=NOOP, executor=noop, projector=NoopProjector(), read_only=True, timeout_s=30),
        ToolSpec(
            name=SLEEP, executor=sleep50, projector=NoopProjector(), read_only=True, timeout_s=30
        ),
    ]
)
