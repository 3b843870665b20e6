"""The execute task sends its chained project step itself (``tasks.worker.project_sender``):
the message and the task-sent event must be the ones Celery's chain follow-up
(``celery.app.trace``) sends for the same request, field for field."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery, signals
from celery.app.task import Context
from celery.canvas import signature

from boundary import CanonicalKey
from tasks.settings import Settings
from tasks.wiring.app import EXECUTE, PROJECT, PROJECTIONS_QUEUE, TOOLS_QUEUE, create_app
from tasks.wiring.dispatcher import CeleryDispatcher, _Origin
from tasks.wiring.failures import CodeOnlyFailures
from tasks.worker.project import project_result
from tasks.worker.project_sender import ProjectSender, _report_only
from tests.unit.test_dispatch_message import sent

KEY = CanonicalKey(run_id="run-7", tool_call_id="call_a1")
ORIGIN = "worker-1@host"


def worker_app() -> Celery:
    """An app on the in-memory transport with the project task registered as a worker has
    it (its options are the real task's)."""
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0", broker_url="memory://", result_backend="cache+memory://"
    )
    app = create_app(settings, name="tests_chained_project")
    app.task(
        name=PROJECT,
        acks_late=project_result.acks_late,
        ignore_result=project_result.ignore_result,
        base=CodeOnlyFailures,
    )(project_result.run)
    return app


def read(app: Celery, queue_name: str) -> dict[str, Any]:
    """The one message on ``queue_name``: headers, properties, body (as the dispatcher's
    message test reads it)."""
    return sent(app, queue_name)


def execute_request(app: Celery, *, attempt: int = 1, traceparent: str = "") -> Context:
    """The execute task's request as a worker makes it from the dispatcher's message."""
    dispatcher = CeleryDispatcher(app)
    if traceparent:
        # The caller's trace context, as ``send_attempt`` takes it from a current span.
        origin = _Origin({"traceparent": traceparent}, app.thread_oid)
        dispatcher._send(KEY, attempt, TOOLS_QUEUE, origin)
    else:
        dispatcher.send_attempt(KEY, attempt=attempt, queue=TOOLS_QUEUE)
    sent = read(app, TOOLS_QUEUE)
    headers, (args, kwargs, embed) = sent["headers"], sent["body"]
    return Context(
        id=headers["id"],
        root_id=headers["root_id"],
        parent_id=headers["parent_id"],
        args=args,
        kwargs=kwargs,
        chain=embed["chain"],
        delivery_info={"priority": 0},
        hostname=ORIGIN,
    )


def celery_follow_up(app: Celery, request: Context) -> None:
    """What ``celery.app.trace`` does with a returned task's chain."""
    chain = request.chain
    step = signature(chain[-1], app=app)
    app.amqp._retry_publish(
        step.apply_async,
        ("STORED",),
        chain=chain[:-1],
        parent_id=request.id,
        root_id=request.root_id or request.id,
        priority=None,
    )


@pytest.fixture
def sent_events() -> list[tuple[str, dict[str, Any]]]:
    return []


def capture_events(
    app: Celery, sender: CeleryDispatcher, events: list[tuple[str, dict[str, Any]]]
) -> None:
    """Celery's follow-up publishes its task-sent event through the app's default event
    dispatcher; ours through the sender's publisher's: both as Celery built it."""

    def record(kind: str, fields: dict[str, Any], *_: Any, **__: Any) -> None:
        events.append((kind, dict(fields)))

    app.amqp._event_dispatcher.publish = record
    sender.publisher.amqp._event_dispatcher.publish = record


@pytest.mark.parametrize(
    "attempt, traceparent, report",
    [
        (1, "", False),
        (2, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        (1, "", True),
    ],
    ids=["first-attempt", "retry-with-trace", "report-only"],
)
def test_the_execute_task_sends_the_project_message_celerys_follow_up_sends(
    attempt: int, traceparent: str, report: bool, sent_events: list[Any]
) -> None:
    # Given an execute request whose chain carries the call's project step (a report-only one
    # when the call was sealed ERROR in line)
    app = worker_app()
    sender = CeleryDispatcher(app)
    capture_events(app, sender, sent_events)
    request = execute_request(app, attempt=attempt, traceparent=traceparent)
    if report:
        _report_only(request)
    chain = [dict(step) for step in request.chain]

    # When Celery's follow-up sends it, and then our sender for the same request
    celery_follow_up(app, request)
    through_celery = read(app, PROJECTIONS_QUEUE)
    request.chain = chain
    assert ProjectSender(app, lambda: sender).send_chained(request)
    sent_here = read(app, PROJECTIONS_QUEUE)

    # Then the two messages and their task-sent events are equal, and Celery has no chain
    # left to send
    assert sent_here == through_celery
    assert request.chain is None
    assert [kind for kind, _ in sent_events] == ["task-sent", "task-sent"]
    assert sent_events[0] == sent_events[1]
    headers = sent_here["headers"]
    assert headers["id"] == KEY.task_id("project")
    assert headers["task"] == PROJECT
    assert headers["parent_id"] == request.id
    assert headers["root_id"] == request.root_id
    assert headers.get("traceparent", "") == traceparent
    assert sent_here["body"][2]["chain"] == []
    assert sent_here["body"][1] == ({"report": True} if report else {})


def test_a_chain_of_another_shape_is_left_to_celery() -> None:
    # Given execute requests whose chain is not the one project step the dispatcher chains
    app = worker_app()
    request = execute_request(app)
    (project,) = request.chain
    two_steps = [dict(project), dict(project)]
    other_task = [dict(project, task=EXECUTE)]
    linked = [dict(project, options={**project["options"], "link": []})]

    for chain in (None, [], two_steps, other_task, linked):
        request.chain = chain
        # When the execute task returns, Then it sends nothing and the chain stays
        assert not ProjectSender(app, lambda: CeleryDispatcher(app)).send_chained(request)
        assert request.chain is chain


def test_publish_signal_receivers_leave_the_chain_to_celery() -> None:
    # Given a receiver of before_task_publish (an instrumentation, say)
    app = worker_app()
    request = execute_request(app)
    chain = request.chain

    def receiver(**_: Any) -> None:
        return None

    signals.before_task_publish.connect(receiver)
    try:
        # Then the chain is left to Celery's own path, which sends that signal
        assert not ProjectSender(app, lambda: CeleryDispatcher(app)).send_chained(request)
    finally:
        signals.before_task_publish.disconnect(receiver)
    assert request.chain is chain


def test_a_publish_that_fails_leaves_the_chain_to_celery() -> None:
    # Given a sender whose broker refuses connections
    app = worker_app()
    request = execute_request(app)
    chain = request.chain
    down = Settings(
        redis_url="redis://127.0.0.1:1/0",
        broker_url="redis://127.0.0.1:1/0",
        result_backend="cache+memory://",
        publish_timeout_s=0.5,
    )
    sender = CeleryDispatcher(create_app(down, name="tests_chained_project_down"))

    # When the execute task returns, Then nothing was sent by it: Celery's follow-up still has
    # the chain to send, its way
    assert not ProjectSender(app, lambda: sender).send_chained(request)
    assert request.chain is chain


def test_a_setting_changed_after_a_send_is_read_again(sent_events: list[Any]) -> None:
    # Given a sender that sent a chained project step once (the settings it reads are kept)
    app = worker_app()
    sender = CeleryDispatcher(app)
    capture_events(app, sender, sent_events)
    chained = ProjectSender(app, lambda: sender)
    assert chained.send_chained(execute_request(app))
    read(app, PROJECTIONS_QUEUE)

    # When a setting it reads changes (another task protocol, then eager tasks), Then the
    # next send reads it: the chain is left to Celery
    for name, value in (("task_protocol", 1), ("task_always_eager", True)):
        request = execute_request(app)
        chain = request.chain
        setattr(app.conf, name, value)
        try:
            assert not chained.send_chained(request)
            assert request.chain is chain
        finally:
            del app.conf.changes[name]  # back to the app's own value

    # And once it is as it was, the next send goes again
    assert chained.send_chained(execute_request(app))
