from __future__ import annotations

from typing import Any

from boundary import (
    EvidenceStatus,
    InvocationStatus,
    Projection,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
    ToolSpec,
)


class EchoProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"n": raw["n"]})


def test_a_call_goes_through_and_is_observed(
    boundary: ToolBoundary, registry: ToolRegistry
) -> None:
    registry.register(
        ToolSpec(
            name="echo", executor=lambda a: {"n": a["n"]}, projector=EchoProjector(), read_only=True
        )
    )
    run = RunContext(run_id="run-1", authorized_tools=frozenset({"echo"}))
    outcome = boundary.invoke(
        ToolCallEnvelope(run_id="run-1", tool_call_id="c1", tool_name="echo", arguments='{"n": 3}'),
        run,
        timeout=5,
    )
    assert outcome.status is InvocationStatus.READY
    assert outcome.result == {"n": 3}
    facts = boundary.observe(run)
    assert [f.tool_call_id for f in facts.facts] == ["c1"]
