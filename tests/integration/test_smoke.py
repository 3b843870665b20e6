from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from boundary import (
    CanonicalKey,
    EvidenceStatus,
    InvocationStatus,
    Projection,
    RedisCanonicalStore,
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


class _Parked:
    """A dispatcher that accepts calls and never runs them (a worker that died at once)."""

    def dispatch(self, key: CanonicalKey) -> None:
        return None

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


def test_a_stuck_call_is_due_for_the_reaper_after_max_pending_even_with_a_later_deadline(
    store: RedisCanonicalStore, registry: ToolRegistry
) -> None:
    # Given a call that no worker will run, in a run whose deadline is a day away
    registry.register(
        ToolSpec(name="echo", executor=lambda a: a, projector=EchoProjector(), read_only=True)
    )
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=_Parked(), max_pending_s=5, reap_grace_s=1
    )
    run = RunContext(
        run_id="run-1",
        authorized_tools=frozenset({"echo"}),
        deadline=datetime.now(UTC) + timedelta(days=1),
    )
    envelope = ToolCallEnvelope(run_id="run-1", tool_call_id="c1", tool_name="echo", arguments={})
    assert boundary.submit(envelope, run).accepted
    # Then the reaper may seal it after max_pending_s + grace, not only after the deadline
    now = datetime.now(UTC)
    assert store.due_pending(now + timedelta(seconds=3)) == []
    assert store.due_pending(now + timedelta(seconds=7)) == [
        CanonicalKey(run_id="run-1", tool_call_id="c1")
    ]
