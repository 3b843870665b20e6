"""``CeleryDispatcher``: an accepted call becomes an execute -> project chain."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.entity import Queue

from boundary import CanonicalKey, DispatchError, ToolOutcome, formats, telemetry
from tasks.wiring.app import EXECUTE, FLOW_WAKE, PROJECT, PROJECTIONS_QUEUE, TOOLS_QUEUE
from tasks.wiring.failures import ToolCallFailed
from tasks.wiring.publish_thread import PublishThread
from tasks.wiring.publisher import publisher_app
from tasks.wiring.results import RecordResults
from tasks.wiring.sent_events import HeldEvents, SentEvents
from tasks.wiring.turn_messages import publish_turn


@contextlib.contextmanager
def _dispatch_failures() -> Iterator[None]:
    """Turns what a send to the broker raised into ``DispatchError``, naming only the
    error's type (kombu's errors name the broker URL); a ``DispatchError`` passes as is."""
    try:
        yield
    except DispatchError:
        raise
    except Exception as exc:
        raise DispatchError(type(exc).__name__) from None


#: Longest step between two looks at a result on a backend that does not push results.
POLL_S = 0.05


def _drain_until_ready(backend: Any, result: Any, timeout: float | None) -> bool:
    """Drains ``backend``'s result consumer until ``result`` is ready (True) or ``timeout``
    seconds passed (False), each drain step cut to the time left.

    Subscribes first, then reads the stored result once, so a result written before the
    subscription took effect is still seen.
    """
    give_up = None if timeout is None else time.monotonic() + timeout
    backend.add_pending_result(result)
    consumer = backend.result_consumer
    consumer.on_wait_for_pending(result)
    while not result.on_ready.ready:
        left = 1.0 if give_up is None else give_up - time.monotonic()
        if left <= 0:
            return False
        # A step that ends with no message raises the builtin TimeoutError (socket.timeout).
        with contextlib.suppress(TimeoutError):
            consumer.drain_events(timeout=left)
    return True


#: kombu's cache key of a declared queue (``hash(Queue)``), by the queue's name.
_queue_idents: dict[str, int] = {}


def _declare(producer: Any, queue: str) -> list[Any] | None:
    """What a send declares: nothing (``[]``) once the producer's connection has declared
    ``queue`` (kombu's cache of declared entities, per connection, holds it), which is when
    kombu would skip it anyway, but after binding a copy of the queue, its exchange and
    binding for every message; else ``None``, so Celery declares it as usual (cached)."""
    ident = _queue_idents.get(queue)
    if ident is None:
        ident = _queue_idents[queue] = hash(Queue(queue))
    declared = getattr(producer.connection, "declared_entities", None)
    return [] if declared is not None and ident in declared else None


class _Origin(NamedTuple):
    """What a message takes from the thread that asked for it, wherever it is published."""

    #: The caller's trace context (W3C ``traceparent``...), empty without one.
    headers: dict[str, str]
    #: The app's reply address of the caller's thread (``Celery.thread_oid``).
    reply_to: str


class CeleryDispatcher:
    """Sends each call as an execute -> project chain with deterministic task ids
    (``<run_id>:<tool_call_id>:execute`` and ``...:project``) and waits on the project task.

    Messages carry the canonical key only; ``argsrepr`` repeats just those ids. ``queues``
    names the queues this dispatcher sends the execute and project steps to (``tools`` and
    ``projections`` unless told otherwise; workers must consume them, ``-Q``). Only these
    first sends: the reaper's re-projections and ``reproject`` still use ``projections``, so
    it is not a way to run a second deployment on the same broker (the benchmark's ablation
    worker uses it to take its own calls).
    """

    def __init__(self, app: Celery | None = None, *, queues: tuple[str, str] | None = None) -> None:
        if app is None:
            from tasks.wiring.app import app as default_app

            app = default_app
        self.app = app
        self.tools_queue, self.projections_queue = queues or (TOOLS_QUEUE, PROJECTIONS_QUEUE)
        #: Sends with a publish timeout; ``app`` keeps the waits (its result backend).
        self.publisher = publisher_app(app)
        #: Publishes the async calls' sends from one thread (started on first use).
        self.publish_thread = PublishThread()
        #: Publishes the sends' task-sent events behind them (off the caller's path).
        self.sent_events = SentEvents(self.publisher)

    @property
    def waits_on_seal(self) -> bool:
        """True when ``wait`` watches the record's seal (our apps' backend): a caller with
        the store at hand may watch it itself (``boundary.waits.await_seal``)."""
        return isinstance(self.app.backend, RecordResults)

    def dispatch(self, key: CanonicalKey) -> None:
        """Sends the call's first attempt to the ``tools`` queue (``send_attempt``)."""
        self.send_attempt(key, attempt=1, queue=TOOLS_QUEUE)

    def send_attempt(
        self, key: CanonicalKey, *, attempt: int, queue: str, countdown_s: float = 0.0
    ) -> None:
        """Sends attempt ``attempt`` of the call: the execute task on ``queue`` (the tool's,
        ``ToolSpec.queue``) with the project step riding in its ``chain`` option.

        This is the message ``(execute.si(...) | project.si(...)).apply_async()`` sends,
        field for field (headers, properties, body, the chained signature's options), built
        without the canvas: no signatures to clone, freeze and prepare per call. A retry
        (``attempt`` > 1) is a new message with its own task id (``...:execute:<attempt>``);
        every attempt's chain ends in the one project task id waiters wait on, and only the
        attempt that keeps a raw response runs it. Its task-sent event (Flower's SENT) is
        published behind it, from ``sent_events``' thread: the caller does not wait for it.
        """
        # The caller's trace goes with both steps (W3C traceparent in the message headers).
        origin = _Origin(telemetry.trace_headers(), self.app.thread_oid)
        self._send(key, attempt, queue, origin, countdown_s)

    def dispatch_many(self, calls: Sequence[tuple[CanonicalKey, str]]) -> None:
        """Sends the first attempt of each ``(key, queue)`` (a model turn's calls), each the
        message ``send_attempt`` sends, in ONE producer batch: on a Redis broker kombu
        buffers the messages' LPUSHes in one pipeline, written in one round trip when the
        batch ends (other brokers publish them one after the other on one connection). The
        first message of each queue is built by Celery, the others copied from it with their
        ids put in (``tasks.wiring.turn_messages``). A batch that fails raises
        ``DispatchError`` for all of it (delivery uncertain)."""
        origin = _Origin(telemetry.trace_headers(), self.app.thread_oid)

        def send(key: CanonicalKey, queue: str, producer: Any, events: Any) -> None:
            self._send(key, 1, queue, origin, producer=producer, events=events)

        # The turn's task-sent events go once its messages are written (``HeldEvents``).
        held = HeldEvents()
        with (
            _dispatch_failures(),
            self.publisher.producer_or_acquire() as producer,
            producer.batch(),
        ):
            publish_turn(producer, held, calls, send)
        held.hand_to(self.sent_events)

    async def asend_attempt(self, key: CanonicalKey, *, attempt: int, queue: str) -> None:
        """``send_attempt`` for an event loop: published from the dispatcher's publishing
        thread (``PublishThread``), with the caller's trace and its thread's reply address.
        Once queued, the send is published even if the caller is cancelled."""
        origin = _Origin(telemetry.trace_headers(), self.app.thread_oid)
        await self.publish_thread.asend(lambda: self._send(key, attempt, queue, origin))

    def _send(
        self,
        key: CanonicalKey,
        attempt: int,
        queue: str,
        origin: _Origin,
        countdown_s: float = 0.0,
        *,
        producer: Any = None,
        events: Any = None,
    ) -> None:
        headers, reply_to = origin
        # Both steps' messages say their format (``boundary.formats``).
        headers = {**headers, formats.HEADER: str(formats.CURRENT)}
        ids = (key.run_id, key.tool_call_id)
        argsrepr = repr(ids)
        execute_id = key.task_id("execute" if attempt == 1 else f"execute:{attempt}")
        if queue == TOOLS_QUEUE:
            queue = self.tools_queue
        kwargs = {"attempt": attempt} if attempt != 1 else {}
        project = {
            "task": PROJECT,
            "args": list(ids),
            "kwargs": {},
            "options": {
                "task_id": key.task_id("project"),
                "queue": self.projections_queue,
                "argsrepr": argsrepr,
                "kwargsrepr": "{}",
                "reply_to": reply_to,
                **({"headers": headers} if headers else {}),
            },
            "subtask_type": None,
            "immutable": True,
        }
        # The execute task as ``app`` knows it: its time limits go into each message.
        execute = self.app.tasks.get(EXECUTE)
        with _dispatch_failures(), self.publisher.producer_or_acquire(producer) as held:
            self.publisher.send_task(
                EXECUTE,
                args=ids,
                kwargs=kwargs,
                task_id=execute_id,
                root_id=execute_id,
                queue=queue,
                countdown=countdown_s or None,
                # The waiting app's id and task options (time limits), as the canvas
                # would set them: the publisher only sends.
                reply_to=reply_to,
                time_limit=getattr(execute, "time_limit", None),
                soft_time_limit=getattr(execute, "soft_time_limit", None),
                argsrepr=argsrepr,
                kwargsrepr=repr(kwargs),
                # The execute task's own option: its result is never stored nor awaited.
                ignore_result=True,
                chain=[project],
                headers=headers or None,
                event_dispatcher=self.sent_events if events is None else events,
                producer=held,
                declare=_declare(held, queue),
            )

    def schedule_wake(self, tool: str, delay_s: float) -> None:
        """Sends the task that hands the tool's free slots to its line in ``delay_s`` (the
        rate limit's next opening; ``boundary.flow.WakeScheduler``). Its one argument is the
        tool's name, which Flower may show."""
        with _dispatch_failures():
            self.publisher.send_task(
                FLOW_WAKE,
                args=(tool,),
                queue=self.projections_queue,
                countdown=delay_s,
                argsrepr=repr((tool,)),
                ignore_result=True,
            )

    def revoke(self, key: CanonicalKey) -> None:
        """Revokes both steps of a cancelled call: a worker drops them unstarted. A step that
        already runs is not terminated: its tool stops at its next ``heartbeat()`` (the record
        is sealed, so its return changes nothing)."""
        with _dispatch_failures():
            self.publisher.control.revoke([key.task_id("execute"), key.task_id("project")])

    def wait(self, key: CanonicalKey, timeout: float | None) -> bool:
        """True when the call's project step ended within ``timeout`` seconds (its record
        then holds the outcome the caller reads), False else (``Dispatcher.wait``)."""
        return self.result(key, timeout) is not None

    def result(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        """The project task's result (the bounded outcome as a dict), waiting at most
        ``timeout`` seconds; ``None`` when there is none by then. For waiters without the
        record at hand (the benchmark's peers); a boundary's waits use ``wait``.

        On our apps (``tasks.wiring.results.BoundaryCelery``) that result is the sealed record,
        waited for on its seal notification (``_wait_record``). On another app's backend:

        ``AsyncResult.get`` drains the result backend in steps of one second and checks its
        timeout only between steps, so ``get(timeout=0.05)`` returned after about a second.
        On a backend that pushes results (Redis), this drains with each step cut to the time
        left; other backends are polled by ``get`` every ``POLL_S`` at most.
        """
        backend = self.app.backend
        if isinstance(backend, RecordResults):
            return self._wait_record(backend, key, timeout)
        result = self.app.AsyncResult(key.task_id("project"))
        try:
            if not backend.is_async:
                interval = POLL_S if timeout is None else min(POLL_S, max(timeout, 0.001))
                value = result.get(
                    timeout=timeout,
                    interval=interval,
                    propagate=False,
                    disable_sync_subtasks=False,
                )
            elif _drain_until_ready(backend, result, timeout):
                value = result.get(timeout=0, propagate=False, disable_sync_subtasks=False)
            else:
                return None
        except CeleryTimeoutError:
            return None
        except Exception:
            # The result backend is unreachable: the caller reads the record instead.
            return None
        finally:
            if not result.on_ready.ready:
                # Stop waiting on it: a timed-out wait keeps its subscription otherwise.
                backend.remove_pending_result(result)
        if isinstance(value, ToolCallFailed) and value.error_code is not None:
            # An ERROR outcome ends the project task in FAILURE carrying its code only.
            return ToolOutcome.error(key.tool_call_id, value.error_code).model_dump(mode="json")
        return value if isinstance(value, dict) else None

    @staticmethod
    def _wait_record(
        backend: RecordResults, key: CanonicalKey, timeout: float | None
    ) -> dict[str, Any] | None:
        """The sealed record's outcome, woken by its seal notification."""
        try:
            meta = backend.wait_record(key, timeout)
        except Exception:
            # The store is unreachable: the caller reads the record and reports it.
            return None
        if meta is None:
            return None
        value = meta["result"]
        if isinstance(value, ToolCallFailed) and value.error_code is not None:
            return ToolOutcome.error(key.tool_call_id, value.error_code).model_dump(mode="json")
        return value if isinstance(value, dict) else None
