"""The worker's one sender of project steps: the only code that sends a call's project task or
touches the ``chain`` of an execute request.

An execute task ends with a plan for its call's project step (``boundary.steps.plan``:
``PROJECT``, ``REPORT`` or ``SKIP``), and ``ProjectSender.send`` carries it out: the step riding
in the request's ``chain`` goes as it is, goes with ``report=True``, or is dropped. The
watchdog's early send (``send_early``: a call it sealed while its step still runs in line) is
that plan sent at once, under the call's usual project task id; a project step sent again (the
reaper's, or after the store failed under it: ``send_projection``, ``resend``) goes from here
too.

The chained step is published the way Celery's chain follow-up would send it, with less work.
Celery sends a task's ``chain`` after the task returns (``celery.app.trace``): it makes a
``Signature`` of the next step, merges its options, and goes through ``Task.apply_async`` and
``Celery.send_task`` (exec options, the router, ``AsyncResult``, the parent's trail) before
``amqp.send_task_message`` publishes it on a producer of the worker's pool, whose Redis channel
builds a new Redis client for the message and another for its task-sent event. For the one step
our dispatcher puts in that chain (the call's project task) most of that is the same every
time. Here the routed options are worked out once per queue; each call builds its message
(``amqp.create_task_message``) and publishes it through ``amqp.send_task_message`` with the
publish retries of Celery's follow-up (``amqp._retry_publish``), on the process's sender of
calls (``CeleryDispatcher.publisher``: one kept Redis client), with its task-sent event in the
same producer batch (on Redis one pipeline: one round trip for both, in Celery's order).

The message is the one Celery's follow-up sends, field for field
(``tests/unit/test_chained_project.py``): task, root and parent ids, ``argsrepr``, the
caller's trace context in its headers, ``reply_to``, an empty ``chain``; so is its task-sent
event. Once the message is out, the request's ``chain`` is cleared and Celery has nothing left
to send.

Anything unusual (a chain of another shape, publish signals with receivers, routers that are
not plain maps, another task protocol, inherited priorities) leaves the chain to Celery, as
does a publish that fails: Celery's follow-up then tries it its way (the project step may then
go twice, which it tolerates: the second finds the call sealed and reports it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery, signals
from celery.app.routes import MapRoute

from boundary import CanonicalKey
from boundary.steps.plan import ProjectPlan
from tasks.wiring.app import PROJECT, PROJECTIONS_QUEUE
from tasks.wiring.dispatcher import CeleryDispatcher
from tasks.worker.step_store import STORE_RETRY_DELAY_S

logger = logging.getLogger(__name__)

#: The options our dispatcher gives the chained project signature (``CeleryDispatcher._send``).
_KNOWN_OPTIONS = frozenset({"task_id", "queue", "argsrepr", "kwargsrepr", "reply_to", "headers"})
#: Signals whose receivers expect Celery's own publishing path (an instrumentation, say).
_PUBLISH_SIGNALS = (signals.before_task_publish, signals.after_task_publish, signals.task_sent)
#: Exec options ``Celery.send_task`` takes as arguments of its own, not routing options.
_LIMITS = ("time_limit", "soft_time_limit")
#: The settings every send reads (a Celery setting lookup costs microseconds: read once, and
#: again whenever the configuration object or one of these values in its changes differs).
_SETTINGS = (
    "task_protocol",
    "task_always_eager",
    "task_inherit_parent_priority",
    "task_send_sent_event",
)


class ProjectSender:
    """Sends a process's project steps: an execute request's chained one, as its plan says,
    and the ones sent on their own (early, again)."""

    def __init__(self, app: Celery, sender: Callable[[], CeleryDispatcher]) -> None:
        #: The worker's app: its project task's options, its configuration.
        self.app = app
        #: This process's sender of calls (made on first use).
        self.sender = sender
        self._lock = threading.Lock()
        #: Queue name -> what the project task's options and the router make of it.
        self._routed: dict[str, dict[str, Any]] = {}
        #: What ``_settings`` read, and of which configuration: (conf, its changes' count and
        #: values of ``_SETTINGS``, the values read).
        self._read: tuple[Any, tuple[Any, ...], tuple[Any, ...]] | None = None

    def send(self, request: Any, plan: ProjectPlan) -> None:
        """Carries out ``plan`` for the project step chained to the execute ``request``,
        once the execute task ends (on a normal return: a failed task sends no chain)."""
        if plan is ProjectPlan.SKIP:
            request.chain = None
            return
        if plan is ProjectPlan.REPORT:
            _report_only(request)
        self.send_chained(request)

    def send_early(self, key: CanonicalKey) -> None:
        """The watchdog sealed a call whose step still runs in line: its project step goes
        out now, only to report the seal (under its usual task id), so its waiters and
        Flower see the end on time. It may run after the record is gone and its ids taken
        again: a report never seals."""
        self.send_projection(key, report=True)

    def send_projection(
        self, key: CanonicalKey, *, attempt: int = 0, countdown: float = 0, report: bool = False
    ) -> None:
        """Sends a call's project step (again), under its usual task id so its waiters wake;
        ``report``: one that only reports the call's sealed outcome. Raises when it cannot."""
        ids = (key.run_id, key.tool_call_id)
        kwargs: dict[str, Any] = {"attempt": attempt} if attempt else {}
        if report:
            kwargs["report"] = True
        self.app.tasks[PROJECT].apply_async(
            args=ids,
            kwargs=kwargs,
            task_id=key.task_id("project"),
            queue=PROJECTIONS_QUEUE,
            countdown=countdown or None,
            argsrepr=repr(ids),
            kwargsrepr=repr(kwargs),
        )

    def resend(self, key: CanonicalKey, attempt: int, *, resends: int) -> None:
        """The store failed under the project step of ``attempt`` (the record is still
        PROJECTING): the step goes again after a growing delay, at most ``resends`` times,
        rather than leave the call to the reaper, which may be an hour away. The reaper stays
        the backstop (a broker on the same failed Redis)."""
        if attempt >= resends:
            return
        delay = min(STORE_RETRY_DELAY_S * 2 ** (attempt + 2), 60.0)
        try:
            self.send_projection(key, attempt=attempt + 1, countdown=delay)
            logger.warning("project %s sent again in %.0fs (store failed)", key.identity, delay)
        except Exception as exc:
            logger.error("project %s not sent again: %s", key.identity, type(exc).__name__)

    def send_chained(self, request: Any) -> bool:
        """Publishes ``request``'s chained project step and clears its ``chain`` (True);
        False when it is left to Celery's chain follow-up (the chain is then untouched)."""
        step = _project_step(getattr(request, "chain", None))
        if step is None or not self._plain_app():
            return False
        try:
            self._publish(request, step)
        except Exception as exc:
            # Celery's follow-up tries again, its way; only the type (kombu names URLs).
            logger.warning("project step left to Celery's chain: %s", type(exc).__name__)
            return False
        request.chain = None
        return True

    def _settings(self) -> tuple[Any, ...]:
        """The values of ``_SETTINGS`` in the app's configuration, read again only when the
        configuration object, or any of them set on it (``conf.changes``: ``conf.update``,
        an attribute set), or how many settings were set on it, differs from the last read."""
        conf = self.app.conf
        changes = conf.changes
        mark = (len(changes), *(changes.get(name) for name in _SETTINGS))
        read = self._read
        if read is not None and read[0] is conf and read[1] == mark:
            return read[2]
        values = tuple(conf[name] for name in _SETTINGS)
        self._read = (conf, mark, values)
        return values

    def _plain_app(self) -> bool:
        protocol, eager, inherit_priority, _ = self._settings()
        if protocol != 2 or eager or inherit_priority:
            return False
        if any(signal.receivers for signal in _PUBLISH_SIGNALS):
            return False
        return all(isinstance(router, MapRoute) for router in self.app.amqp.router.routes)

    def _publish(self, request: Any, step: dict[str, Any]) -> None:
        sender = self.sender()
        publisher = sender.publisher
        amqp = publisher.amqp
        options = step["options"]
        task = self.app.tasks[PROJECT]
        routed = dict(self._routed_options(publisher, task, options["queue"]))
        time_limit, soft_time_limit = (routed.pop(name) for name in _LIMITS)
        routed["argsrepr"] = options.get("argsrepr")
        routed["kwargsrepr"] = options.get("kwargsrepr")
        headers = options.get("headers")
        if headers:
            routed["headers"] = dict(headers)
        parent_id = request.id
        message = amqp.create_task_message(
            options["task_id"],
            PROJECT,
            list(step.get("args") or ()),
            dict(step.get("kwargs") or {}),
            # The thread's reply address in the worker's app, as Celery's send would take it.
            reply_to=options.get("reply_to") or self.app.thread_oid,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            create_sent_event=self._settings()[3],
            root_id=request.root_id or parent_id,
            parent_id=parent_id,
            # The rest of the chain: none (the project step is its last).
            chain=[],
            ignore_result=task.ignore_result,
            **routed,
        )
        # As ``Celery.send_task`` publishes (kombu's errors raised as Celery's), the message
        # and its task-sent event in one producer batch: on Redis one pipeline, one round trip.
        with (
            publisher.producer_or_acquire() as producer,
            producer.connection._reraise_as_library_errors(),
            producer.batch(),
        ):
            amqp._retry_publish(amqp.send_task_message, producer, PROJECT, message, **routed)

    def _routed_options(self, publisher: Celery, task: Any, queue: str) -> dict[str, Any]:
        """What ``Task.apply_async`` and the router make of the project step's options on
        ``queue``: worked out once (the routes are plain maps, the task's options fixed)."""
        routed = self._routed.get(queue)
        if routed is not None:
            return routed
        # As ``Task.apply_async`` merges them, None values too (the router drops those).
        exec_options = dict(task._get_exec_options())
        if exec_options.pop("expires", None) is not None:
            raise ValueError("a project task with a default expiry")  # left to Celery
        limits = {name: exec_options.pop(name, None) for name in _LIMITS}
        routed = dict(
            publisher.amqp.router.route({**exec_options, "queue": queue}, PROJECT, task_type=task)
        )
        routed.update(limits)
        with self._lock:
            self._routed[queue] = routed
        return routed


def _report_only(request: Any) -> None:
    """The project step chained to this execute request only reports the call's sealed
    outcome (``project_result(report=True)``)."""
    chain = request.chain
    if not chain:
        return
    step = chain[-1]
    kwargs = {**(step.get("kwargs") or {}), "report": True}
    step["kwargs"] = kwargs
    step.setdefault("options", {})["kwargsrepr"] = repr(kwargs)


def _project_step(chain: Any) -> dict[str, Any] | None:
    """The chain's one step when it is the project step our dispatcher chains, else None."""
    if not isinstance(chain, list) or len(chain) != 1:
        return None
    step = chain[0]
    if not isinstance(step, dict) or step.get("task") != PROJECT or not step.get("immutable"):
        return None
    options = step.get("options")
    if not isinstance(options, dict) or not options.keys() <= _KNOWN_OPTIONS:
        return None
    if step.get("subtask_type") or not options.get("task_id") or not options.get("queue"):
        return None
    return step
