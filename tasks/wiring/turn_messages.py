"""A model turn's execute messages: the first of each queue built by Celery, the others copied
from it with only what differs per call changed.

Celery builds every message from scratch (routing, options, the message's headers and body,
the publish options, the task-sent event): about 0.3 ms of the caller's CPU each, so a turn
of eight spent more on building its messages than on its one broker round trip. The calls of
a turn differ only in their ids: the same task, queue, options, reply address and trace
headers. So the first call of each queue goes through ``send_task`` as one call by itself
does, with its producer and event dispatcher recorded (``Recorder``); each other call's
message is that one with its ids put in (``TurnTemplate``): the task id (header ``id``,
``root_id``, the ``correlation_id`` property), the arguments and their ``argsrepr`` (header
and property), and the chained project step's task id, arguments and ``argsrepr``; its
task-sent event is the first's with its task id, root id and ``argsrepr``. kombu then
serializes and publishes it as Celery's own publish would (``Producer.publish`` with the
options Celery gave the first), into the same producer batch. A template is checked once:
a message made from it for another call must name nothing of the first call, else (a Celery
that added a field naming the call) every message goes through Celery.

Celery's publish signals (``before_task_publish``, ``after_task_publish``, ``task_sent``) fire
for messages built by Celery only: with a receiver connected (an instrumentation that adds
headers of its own per message), every message of the turn goes through Celery
(``copies_allowed``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from celery import signals

from boundary import CanonicalKey

#: Celery's publish signals: a receiver on any of them sees (and may change) each message.
_PUBLISH_SIGNALS = (signals.before_task_publish, signals.after_task_publish, signals.task_sent)


def copies_allowed() -> bool:
    """True when no receiver listens to Celery's publish signals (copies would skip them)."""
    return not any(signal.receivers for signal in _PUBLISH_SIGNALS)


class Recorder:
    """Stands in for ``send_task``'s producer and event dispatcher: hands everything on, and
    keeps the task message (its body and publish options) and its task-sent event's fields
    as Celery made them."""

    def __init__(self, producer: Any, events: Any) -> None:
        self._producer = producer
        self._events = events
        self.body: Any = None
        self.options: dict[str, Any] | None = None
        self.event: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        # Celery reaches the producer's connection (its error translation) through this.
        return getattr(self._producer, name)

    def publish(self, body: Any, **options: Any) -> Any:
        """The producer's ``publish``: the task message."""
        self.body, self.options = body, options
        return self._producer.publish(body, **options)

    @property
    def event_dispatcher(self) -> EventRecorder:
        """What ``send_task`` gets as its ``event_dispatcher``."""
        return EventRecorder(self)

    def template(self, key: CanonicalKey) -> TurnTemplate | None:
        """The recorded message as a template for other calls of the turn, ``None`` when
        nothing was published or it is not the execute message this module knows (then
        every call goes through Celery)."""
        if self.options is None:
            return None
        return TurnTemplate.of(key, self.body, self.options, self.event, self._events)


class EventRecorder:
    """The event dispatcher side of a ``Recorder``: keeps the task-sent event's fields."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def publish(self, type: str, fields: dict[str, Any], producer: Any, **options: Any) -> None:
        recorder = self._recorder
        recorder.event = dict(fields)
        # The real producer: an event published at once (a full queue) is not the message.
        recorder._events.publish(type, fields, recorder._producer, **options)


@dataclass(frozen=True, slots=True)
class TurnTemplate:
    """One call's execute message (attempt 1), from which the others of its queue are made."""

    #: ``(args, kwargs, embed)`` as Celery serializes it (``embed["chain"]``: the project step).
    body: tuple[Any, dict[str, Any], dict[str, Any]]
    #: ``Producer.publish``'s keyword arguments (headers and properties among them).
    options: dict[str, Any]
    #: The task-sent event's fields, ``None`` without one (``task_send_sent_event`` off).
    event: dict[str, Any] | None
    #: Where task-sent events go (the dispatcher's ``SentEvents``).
    events: Any

    @classmethod
    def of(
        cls,
        key: CanonicalKey,
        body: Any,
        options: dict[str, Any],
        event: dict[str, Any] | None,
        events: Any,
    ) -> TurnTemplate | None:
        """The template of ``key``'s recorded message, ``None`` when its shape is not the
        one ``message`` rewrites (a Celery that builds the message otherwise)."""
        execute_id = key.task_id("execute")
        headers = options.get("headers")
        if not (
            isinstance(body, tuple)
            and len(body) == 3
            and isinstance(body[2], dict)
            and isinstance(headers, dict)
            and headers.get("id") == execute_id
            and headers.get("root_id") == execute_id
            and options.get("correlation_id") == execute_id
        ):
            return None
        chain = body[2].get("chain")
        if not (isinstance(chain, list) and len(chain) == 1 and isinstance(chain[0], dict)):
            return None
        template = cls(body, options, event, events)
        # Another call's message must name nothing of this one: a field that still does is
        # one ``message`` does not rewrite (a Celery that added one), so no copies.
        probe = CanonicalKey(
            run_id=key.run_id, tool_call_id=_PROBES[key.tool_call_id == _PROBES[0]]
        )
        made = (*template.message(probe), template.event_fields(probe) if event else None)
        named = {key.tool_call_id, execute_id, key.task_id("project"), _ids(key)[1]}
        return None if _names(made, named) else template

    def publish(self, producer: Any, key: CanonicalKey, *, buffered: bool = False) -> None:
        """Publishes ``key``'s message on ``producer`` (in its batch), then queues its
        task-sent event behind it, as ``send_task`` does.

        ``buffered``: the producer's batch buffers the message (a Redis pipeline, written
        once when the batch ends), so publishing it does no I/O: kombu's retry wrapper
        (``Connection.ensure``, made anew per publish) has nothing to retry and is left out;
        the batch's one write is not retried either way.
        """
        body, options = self.message(key)
        # The event's publish options are Celery's for the message's (the template's).
        retry = {"retry": options.get("retry"), "retry_policy": options.get("retry_policy")}
        if buffered:
            options["retry"] = False
        producer.publish(body, **options)
        if self.event is not None:
            self.events.publish("task-sent", self.event_fields(key), producer, **retry)

    def message(self, key: CanonicalKey) -> tuple[Any, dict[str, Any]]:
        """``key``'s message: the body and publish options of the template with its ids."""
        ids, argsrepr, execute_id = _ids(key)
        _, kwargs, embed = self.body
        (project,) = embed["chain"]
        chained = {
            **project,
            "args": list(ids),
            "options": {
                **project["options"],
                "task_id": key.task_id("project"),
                "argsrepr": argsrepr,
            },
        }
        body = (ids, kwargs, {**embed, "chain": [chained]})
        headers = {
            **self.options["headers"],
            "id": execute_id,
            "root_id": execute_id,
            "argsrepr": argsrepr,
        }
        options = {**self.options, "headers": headers, "correlation_id": execute_id}
        if "argsrepr" in options:
            # Celery passes its leftover options on as message properties.
            options["argsrepr"] = argsrepr
        declare = options.get("declare")
        if isinstance(declare, list):
            # kombu appends to it: each message its own list.
            options["declare"] = list(declare)
        return body, options

    def event_fields(self, key: CanonicalKey) -> dict[str, Any]:
        """``key``'s task-sent event: the template's with its ids."""
        assert self.event is not None
        _, argsrepr, execute_id = _ids(key)
        return {**self.event, "uuid": execute_id, "root_id": execute_id, "args": argsrepr}


#: Ids of the call a template is checked with (``TurnTemplate.of``): the first unless it is
#: the template's own.
_PROBES = ("turn-template-probe", "turn-template-probe-2")


def _names(value: Any, named: set[str]) -> bool:
    """True when a string in ``value`` (nested dicts, lists, tuples) is one of ``named``."""
    if isinstance(value, str):
        return value in named
    if isinstance(value, dict):
        return any(_names(item, named) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_names(item, named) for item in value)
    return False


def _ids(key: CanonicalKey) -> tuple[tuple[str, str], str, str]:
    """The execute message's arguments, their ``argsrepr`` and its task id (as ``_send``)."""
    ids = (key.run_id, key.tool_call_id)
    return ids, repr(ids), key.task_id("execute")


#: Sends one call through Celery with the given producer and event dispatcher.
SendThrough = Callable[[CanonicalKey, str, Any, Any], None]


def buffers(producer: Any) -> bool:
    """True when a batch of ``producer`` buffers its publishes (kombu's test: the channel
    makes publish batches and says they are safe, as on a Redis broker)."""
    channel = producer.channel
    return (
        getattr(channel, "create_publish_batch", None) is not None
        and getattr(channel, "supports_batch_publish", True) is True
    )


def publish_turn(
    producer: Any, events: Any, calls: Sequence[tuple[CanonicalKey, str]], send: SendThrough
) -> None:
    """Publishes the first attempt of each ``(key, queue)`` on ``producer``, inside its
    ``batch()``: the first call of each queue through Celery (``send(key, queue, producer,
    event_dispatcher)``), the others copied from it (each through Celery when copies are
    not allowed)."""
    templates: dict[str, TurnTemplate | None] = {}
    copying = copies_allowed()
    buffered = copying and len(calls) > 1 and buffers(producer)
    for key, queue in calls:
        template = templates.get(queue)
        if template is not None:
            template.publish(producer, key, buffered=buffered)
        elif copying and queue not in templates:
            recorder = Recorder(producer, events)
            send(key, queue, recorder, recorder.event_dispatcher)
            templates[queue] = recorder.template(key)
        else:
            send(key, queue, producer, events)
