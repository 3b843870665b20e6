"""``CeleryDispatcher.dispatch`` builds the chain's message without the canvas: it must be the
message ``(execute.si(...) | project.si(...)).apply_async()`` sends, field for field."""

from __future__ import annotations

import asyncio
from typing import Any

from celery import Celery

from boundary import CanonicalKey, formats
from tasks.settings import Settings
from tasks.wiring.app import EXECUTE, PROJECT, PROJECTIONS_QUEUE, TOOLS_QUEUE, create_app
from tasks.wiring.dispatcher import CeleryDispatcher

KEY = CanonicalKey(run_id="run-7", tool_call_id="call_a1")


def memory_app() -> Celery:
    # The in-memory transport: the message is read back in-process, no broker needed.
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0", broker_url="memory://", result_backend="cache+memory://"
    )
    return create_app(settings, name="tests_dispatch_message")


def canvas_dispatch(
    app: Celery, key: CanonicalKey, queues: tuple[str, str] = (TOOLS_QUEUE, PROJECTIONS_QUEUE)
) -> None:
    ids = (key.run_id, key.tool_call_id)

    def step(name: str, suffix: str, queue: str, **options: Any) -> Any:
        return app.signature(
            name,
            args=ids,
            immutable=True,
            task_id=key.task_id(suffix),
            queue=queue,
            argsrepr=repr(ids),
            kwargsrepr="{}",
            # Both steps say their format (boundary.formats), as the dispatcher's do.
            headers={formats.HEADER: str(formats.CURRENT)},
            **options,
        )

    (step(EXECUTE, "execute", queues[0]) | step(PROJECT, "project", queues[1])).apply_async()


def sent(app: Celery, queue_name: str = TOOLS_QUEUE) -> dict[str, Any]:
    with app.connection_for_read() as connection:
        queue = connection.SimpleQueue(queue_name)
        message = queue.get(timeout=2)
        message.ack()
        queue.close()
    properties = dict(message.properties)
    properties.pop("delivery_tag", None)
    properties.pop("delivery_info", None)
    return {"headers": message.headers, "properties": properties, "body": message.decode()}


def test_dispatch_sends_the_message_the_canvas_chain_sends() -> None:
    # Given the same call sent once through the canvas and once by the dispatcher
    app = memory_app()
    canvas_dispatch(app, KEY)
    through_canvas = sent(app)
    CeleryDispatcher(app).dispatch(KEY)
    dispatched = sent(app)

    # Then the messages are equal: headers, properties, and the body with its chain
    assert dispatched == through_canvas
    args, kwargs, embed = dispatched["body"]
    assert (args, kwargs) == ([KEY.run_id, KEY.tool_call_id], {})
    (project,) = embed["chain"]
    assert project["task"] == PROJECT
    assert project["options"]["task_id"] == KEY.task_id("project")
    assert project["options"]["queue"] == PROJECTIONS_QUEUE
    assert dispatched["headers"]["id"] == KEY.task_id("execute")
    assert dispatched["headers"]["argsrepr"] == repr((KEY.run_id, KEY.tool_call_id))


def test_dispatch_to_named_queues_matches_the_canvas_on_those_queues() -> None:
    # Given a dispatcher told other queues
    app = memory_app()
    queues = ("other_tools", "other_projections")

    # When the same call goes through the canvas on those queues and through the dispatcher
    canvas_dispatch(app, KEY, queues)
    through_canvas = sent(app, queues[0])
    CeleryDispatcher(app, queues=queues).dispatch(KEY)
    dispatched = sent(app, queues[0])

    # Then the execute step is on the first queue and its chained project step on the second
    assert dispatched == through_canvas
    (project,) = dispatched["body"][2]["chain"]
    assert project["options"]["queue"] == queues[1]


def test_an_async_send_publishes_the_same_message_from_the_publishing_thread() -> None:
    # Given the same call sent once through the canvas and once by the dispatcher's
    # asend_attempt (an event loop's send, published from the dispatcher's one thread)
    app = memory_app()
    canvas_dispatch(app, KEY)
    through_canvas = sent(app)
    dispatcher = CeleryDispatcher(app)
    asyncio.run(dispatcher.asend_attempt(KEY, attempt=1, queue=TOOLS_QUEUE))
    dispatched = sent(app)
    dispatcher.publish_thread.close(timeout=5)

    # Then the messages are equal, field for field
    assert dispatched == through_canvas


class Events:
    """A dispatcher's task-sent events, as it queues them (``SentEvents.publish``)."""

    def __init__(self) -> None:
        self.fields: list[dict[str, Any]] = []

    def publish(self, type: str, fields: dict[str, Any], producer: Any, **options: Any) -> None:
        assert type == "task-sent"
        self.fields.append(dict(fields))

    def publish_many(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        # A turn's events, handed over once its messages are written, stamped when sent
        for type, fields in events:
            assert fields.pop("timestamp") > 0
            self.publish(type, fields, None)


def counting_sends(dispatcher: CeleryDispatcher) -> list[str]:
    """The task ids the dispatcher's publisher builds through Celery's ``send_task``."""
    built: list[str] = []
    send_task = dispatcher.publisher.send_task

    def counted(name: str, *args: Any, **options: Any) -> Any:
        built.append(options["task_id"])
        return send_task(name, *args, **options)

    dispatcher.publisher.send_task = counted  # type: ignore[method-assign]
    return built


TURN = [CanonicalKey(run_id="run-7", tool_call_id=f"call_t{i}") for i in range(4)]


def test_a_turn_sends_each_call_the_message_and_event_send_attempt_sends() -> None:
    # Given the calls of a turn sent one by one (send_attempt), their messages and events read
    app = memory_app()
    dispatcher = CeleryDispatcher(app)
    dispatcher.sent_events = Events()  # type: ignore[assignment]
    for key in TURN:
        dispatcher.send_attempt(key, attempt=1, queue=TOOLS_QUEUE)
    one_by_one = [sent(app) for _ in TURN]
    events_one_by_one = dispatcher.sent_events.fields  # type: ignore[attr-defined]

    # When the same calls go as one turn
    dispatcher.sent_events = Events()  # type: ignore[assignment]
    built = counting_sends(dispatcher)
    dispatcher.dispatch_many([(key, TOOLS_QUEUE) for key in TURN])
    turn = [sent(app) for _ in TURN]

    # Then Celery built the first message only, and every message and task-sent event of the
    # turn is the one the call sent alone has, field for field (ids included: they are the
    # calls' own)
    assert built == [TURN[0].task_id("execute")]
    assert turn == one_by_one
    assert dispatcher.sent_events.fields == events_one_by_one  # type: ignore[attr-defined]
    assert [m["headers"]["id"] for m in turn] == [key.task_id("execute") for key in TURN]
    assert [m["body"][2]["chain"][0]["options"]["task_id"] for m in turn] == [
        key.task_id("project") for key in TURN
    ]
    assert [e["uuid"] for e in events_one_by_one] == [key.task_id("execute") for key in TURN]


def test_a_turn_over_two_queues_builds_one_message_per_queue_and_copies_the_rest() -> None:
    # Given a turn whose calls alternate between two tools' queues
    app = memory_app()
    dispatcher = CeleryDispatcher(app)
    queues = [TOOLS_QUEUE if i % 2 == 0 else "long" for i in range(len(TURN))]
    for key, queue in zip(TURN, queues, strict=True):
        dispatcher.send_attempt(key, attempt=1, queue=queue)
    one_by_one = {key: sent(app, queue) for key, queue in zip(TURN, queues, strict=True)}

    # When they go as one turn
    built = counting_sends(dispatcher)
    dispatcher.dispatch_many(list(zip(TURN, queues, strict=True)))
    turn = {key: sent(app, queue) for key, queue in zip(TURN, queues, strict=True)}

    # Then the first call of each queue was built by Celery, and every message is the one
    # the call sent alone has, on its own queue
    assert built == [TURN[0].task_id("execute"), TURN[1].task_id("execute")]
    assert turn == one_by_one


def test_with_a_publish_signal_receiver_every_message_of_a_turn_goes_through_celery() -> None:
    # Given a receiver of Celery's before_task_publish (an instrumentation adding headers)
    from celery import signals

    seen: list[str] = []

    def receiver(sender: Any = None, headers: Any = None, **kwargs: Any) -> None:
        seen.append(headers["id"])
        headers["x-seen"] = headers["id"]

    app = memory_app()
    dispatcher = CeleryDispatcher(app)
    built = counting_sends(dispatcher)
    signals.before_task_publish.connect(receiver, weak=False)
    try:
        # When a turn is sent
        dispatcher.dispatch_many([(key, TOOLS_QUEUE) for key in TURN])
    finally:
        signals.before_task_publish.disconnect(receiver)
    turn = [sent(app) for _ in TURN]

    # Then each message was built by Celery and seen by the receiver, with its own headers
    ids = [key.task_id("execute") for key in TURN]
    assert built == ids and seen == ids
    assert [m["headers"]["x-seen"] for m in turn] == ids


def test_a_message_field_naming_the_call_that_copies_would_not_rewrite_stops_the_copies() -> None:
    # Given a Celery whose message carries one more field naming the call (here: a property
    # set from the task id), which the turn's copies do not know to rewrite
    app = memory_app()
    dispatcher = CeleryDispatcher(app)
    built = counting_sends(dispatcher)
    counted = dispatcher.publisher.send_task

    def with_call_field(name: str, *args: Any, **options: Any) -> Any:
        return counted(name, *args, x_call=options["task_id"], **options)

    dispatcher.publisher.send_task = with_call_field  # type: ignore[method-assign]

    # When a turn is sent
    dispatcher.dispatch_many([(key, TOOLS_QUEUE) for key in TURN])
    turn = [sent(app) for _ in TURN]

    # Then no message was copied: each was built by Celery and carries its own call's field
    ids = [key.task_id("execute") for key in TURN]
    assert built == ids
    assert [m["properties"]["x_call"] for m in turn] == ids


def test_a_queue_is_declared_on_a_connections_first_send_and_not_bound_again_after(
    monkeypatch: Any,
) -> None:
    import kombu.messaging

    declared: list[str] = []
    maybe_declare = kombu.messaging.maybe_declare

    def counted(entity: Any, *args: Any, **kwargs: Any) -> Any:
        if entity.name == TOOLS_QUEUE:  # not the task-sent events' exchange
            declared.append(entity.name)
        return maybe_declare(entity, *args, **kwargs)

    monkeypatch.setattr(kombu.messaging, "maybe_declare", counted)
    dispatcher = CeleryDispatcher(memory_app())
    # (kombu pools producers by broker URL: start from a connection that declared nothing)
    with dispatcher.publisher.producer_or_acquire() as producer:
        producer.connection.declared_entities.clear()
    # The first send on the publisher's connection declares the tools queue (as Celery does)
    dispatcher.dispatch(KEY)
    assert declared == [TOOLS_QUEUE]
    # The next ones find it in the connection's cache of declared entities: nothing to bind
    dispatcher.dispatch(CanonicalKey(run_id="run-7", tool_call_id="call_a2"))
    dispatcher.dispatch(CanonicalKey(run_id="run-7", tool_call_id="call_a3"))
    assert declared == [TOOLS_QUEUE]
    # And a connection that starts again (its cache cleared) declares it again
    with dispatcher.publisher.producer_or_acquire() as producer:
        producer.connection.declared_entities.clear()
    dispatcher.dispatch(CanonicalKey(run_id="run-7", tool_call_id="call_a4"))
    assert declared == [TOOLS_QUEUE, TOOLS_QUEUE]
    # Every message went out
    app = dispatcher.app
    ids = [sent(app)["headers"]["id"] for _ in range(4)]
    assert ids == [f"run-7:call_a{n}:execute" for n in range(1, 5)]
