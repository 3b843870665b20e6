"""Tools for the Celery integration tests: imported by workers through
``TOOL_BOUNDARY_TOOLS=tests.celery_tools:registry`` and by the tests themselves."""

from __future__ import annotations

import os
import time
from typing import Any

from boundary import EvidenceStatus, Projection, ToolRegistry, ToolSpec

#: Text that must never reach an agent, a task result or Flower.
SECRET = "sk-live-SECRET-7f3a9c"
SECRET_URL = "redis://:hunter2-pass@10.9.8.7:6379/0"
STACK = 'Traceback (most recent call last):\n  File "/srv/app/secrets.py", line 1'


class HitsProjector:
    """EVIDENCE_FOUND when there are hits, else a scoped NO_EVIDENCE."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        hits = raw["hits"]
        if not hits:
            return Projection(
                evidence_status=EvidenceStatus.NO_EVIDENCE, scope={"query": request.get("query")}
            )
        return Projection(
            evidence_status=EvidenceStatus.EVIDENCE_FOUND,
            result={"count": len(hits), "first": hits[0]["id"]},
            scope={"query": request.get("query")},
        )


class RaisingProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        raise RuntimeError(f"projector broke: {SECRET} {SECRET_URL} {STACK}")


class InvalidEvidenceProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> dict[str, Any]:
        return {"evidence_status": "MAYBE", "result": {"x": 1}}


class HugeResultProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result="x" * 100_000)


class SecretFreeProjector:
    """Projects only a count: the raw response's secret stays Harness-only."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"n": len(raw)})


def lookup(arguments: dict[str, Any]) -> dict[str, Any]:
    query = arguments["query"]
    if query == "nothing":
        return {"hits": []}
    return {"hits": [{"id": f"doc-{i}", "text": f"{query} {i}"} for i in range(3)]}


def boom(arguments: dict[str, Any]) -> Any:
    raise RuntimeError(f"tool broke: {SECRET} {SECRET_URL} {STACK}")


def sleepy(arguments: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(arguments.get("seconds", 1.0)))
    return {"hits": [{"id": f"slept-{arguments.get('n', 0)}", "pid": os.getpid()}]}


def huge_raw(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"blob": "y" * (int(arguments.get("bytes", 2_000_000)))}


def leaky(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"token": SECRET, "dsn": SECRET_URL, "echo": arguments}


def build_registry() -> ToolRegistry:
    hits = HitsProjector()
    return ToolRegistry(
        [
            ToolSpec(name="lookup", executor=lookup, projector=hits, read_only=True),
            ToolSpec(name="boom", executor=boom, projector=hits, read_only=True),
            ToolSpec(
                name="bad_projector", executor=lookup, projector=RaisingProjector(), read_only=True
            ),
            ToolSpec(
                name="invalid_evidence",
                executor=lookup,
                projector=InvalidEvidenceProjector(),
                read_only=True,
            ),
            ToolSpec(name="huge_raw", executor=huge_raw, projector=hits, read_only=True),
            ToolSpec(
                name="huge_result",
                executor=lookup,
                projector=HugeResultProjector(),
                read_only=True,
            ),
            ToolSpec(name="slow", executor=sleepy, projector=hits, read_only=True, timeout_s=1.0),
            ToolSpec(name="sleepy", executor=sleepy, projector=hits, read_only=True, timeout_s=8),
            ToolSpec(name="leaky", executor=leaky, projector=SecretFreeProjector(), read_only=True),
            ToolSpec(name="writer", executor=lookup, projector=hits, read_only=False),
        ]
    )


registry = build_registry()


def suicide(arguments: dict[str, Any]) -> Any:
    """Kills the process running it: every attempt loses its worker."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


registry.register(
    ToolSpec(name="suicide", executor=suicide, projector=HitsProjector(), read_only=True)
)
