"""One decision for a call's project step (``boundary.steps.plan.plan_of``), and the worker's
one sender carrying it out on the execute request's chain (``ProjectSender.send``)."""

from __future__ import annotations

from typing import Any

import pytest
from celery.app.task import Context

from boundary import ErrorCode, InvocationStatus, ToolOutcome
from boundary.models import EvidenceStatus
from boundary.steps.attempts import ExecuteResult
from boundary.steps.plan import ProjectPlan, plan_of
from tasks.worker.project_sender import ProjectSender
from tests.unit.test_chained_project import execute_request, worker_app

TOO_LARGE = ToolOutcome.error("c1", ErrorCode.RESULT_TOO_LARGE)
NO_STORE = ToolOutcome.error("c1", ErrorCode.STORE_UNAVAILABLE)
READY = ToolOutcome(
    tool_call_id="c1", status=InvocationStatus.READY, evidence_status=EvidenceStatus.EVIDENCE_FOUND
)


@pytest.mark.parametrize(
    "executed, outcome, plan",
    [
        (ExecuteResult.STORED, None, ProjectPlan.PROJECT),
        (ExecuteResult.SEALED, None, ProjectPlan.PROJECT),
        (ExecuteResult.MISSING, None, ProjectPlan.PROJECT),
        (ExecuteResult.HANDED_ON, None, ProjectPlan.SKIP),
        (ExecuteResult.STORED, READY, ProjectPlan.SKIP),
        (ExecuteResult.STORED, TOO_LARGE, ProjectPlan.REPORT),
        (ExecuteResult.STORED, NO_STORE, ProjectPlan.PROJECT),
    ],
)
def test_the_plan_follows_how_the_execute_step_ended(
    executed: ExecuteResult, outcome: ToolOutcome | None, plan: str
) -> None:
    assert plan_of(executed, outcome) == plan


def chained(request: Context) -> dict[str, Any]:
    (step,) = request.chain
    return step  # type: ignore[no-any-return]


def test_skip_drops_the_chained_project_step() -> None:
    app = worker_app()
    request = execute_request(app)
    ProjectSender(app, lambda: None).send(request, ProjectPlan.SKIP)  # type: ignore[arg-type,return-value]
    assert request.chain is None


def test_report_sends_the_chained_step_as_a_report(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a sender whose chained send is recorded
    app = worker_app()
    request = execute_request(app)
    sender = ProjectSender(app, lambda: None)  # type: ignore[arg-type,return-value]
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(sender, "send_chained", lambda req: sent.append(chained(req)) or True)

    # When it carries out REPORT, Then the chained step goes with report=True
    sender.send(request, ProjectPlan.REPORT)
    assert [step["kwargs"] for step in sent] == [{"report": True}]
    assert sent[0]["options"]["kwargsrepr"] == repr({"report": True})

    # And PROJECT sends it as chained
    sent.clear()
    sender.send(execute_request(app), ProjectPlan.PROJECT)
    assert [step["kwargs"] for step in sent] == [{}]
