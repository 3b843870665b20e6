"""``CeleryDispatcher.dispatch`` builds the chain's message without the canvas: it must be the
message ``(execute.si(...) | project.si(...)).apply_async()`` sends, field for field."""

from __future__ import annotations

import asyncio
from typing import Any

from celery import Celery

from boundary import CanonicalKey
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
