"""How accepted calls reach execution: the ``Dispatcher`` protocol and an in-process one."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from boundary import telemetry
from boundary.errors import failure_name
from boundary.models import CanonicalKey, ToolOutcome
from boundary.registry import DEFAULT_QUEUE, ToolRegistry
from boundary.steps import AttemptSender, AttemptTerms, ExecuteResult, execute_step, project_step
from boundary.store.base import CanonicalStore

logger = logging.getLogger(__name__)


@runtime_checkable
class Dispatcher(Protocol):
    """Hands an accepted call to execution, and answers for its projected outcome."""

    def dispatch(self, key: CanonicalKey) -> None:
        """Starts the call; raises when it cannot be handed over."""

    def wait(self, key: CanonicalKey, timeout: float | None) -> bool:
        """Waits at most ``timeout`` seconds for the call's projected outcome: True when it
        came, False when the backend has none (gone, never written, or not ready in time).
        Either way the caller then reads the record, which decides. (A dispatcher written for
        the earlier protocol, answering the outcome as a dict or ``None``, still works.)"""


@runtime_checkable
class Revoker(Protocol):
    """A dispatcher that can also withdraw a call's queued work (optional)."""

    def revoke(self, key: CanonicalKey) -> None:
        """Stops the call's steps that have not started; raises when it cannot reach them."""


def dispatch_call(dispatcher: Dispatcher, key: CanonicalKey, queue: str = DEFAULT_QUEUE) -> None:
    """Sends an accepted call's first attempt: to its tool's queue when the dispatcher
    routes attempts (``AttemptSender``), else through its plain ``dispatch``."""
    if isinstance(dispatcher, AttemptSender):
        dispatcher.send_attempt(key, attempt=1, queue=queue)
    else:
        dispatcher.dispatch(key)


@runtime_checkable
class BatchDispatcher(Protocol):
    """A dispatcher that sends the first attempts of many calls (a model turn) together, in
    one broker round trip (optional; ``dispatch_many`` sends one by one without it)."""

    def dispatch_many(self, calls: Sequence[tuple[CanonicalKey, str]]) -> None:
        """Sends attempt 1 of each ``(key, queue)``, in order; raises when the batch could
        not be sent for certain (then any, all or none of it may have gone)."""


def dispatch_many(dispatcher: Dispatcher, calls: Sequence[tuple[CanonicalKey, str]]) -> list[bool]:
    """Sends the first attempt of each accepted ``(key, queue)``; whether each was sent.

    The dispatcher's own ``dispatch_many`` (one round trip: a batch that fails fails for
    every call of it, as a publish that fails does for its one call); else ``dispatch_call``
    one after the other, each failing alone."""
    if not calls:
        return []
    if isinstance(dispatcher, BatchDispatcher):
        try:
            dispatcher.dispatch_many(calls)
        except Exception as exc:
            # Only the error's type: its text may name the broker's URL.
            logger.warning("a batch of %d calls was not sent (%s)", len(calls), failure_name(exc))
            return [False] * len(calls)
        return [True] * len(calls)
    sent: list[bool] = []
    for key, queue in calls:
        try:
            dispatch_call(dispatcher, key, queue)
        except Exception:
            sent.append(False)
        else:
            sent.append(True)
    return sent


@runtime_checkable
class AsyncAttemptSender(Protocol):
    """A dispatcher that sends an attempt without blocking an event loop (optional)."""

    async def asend_attempt(self, key: CanonicalKey, *, attempt: int, queue: str) -> None:
        """``AttemptSender.send_attempt`` for an event loop; raises on failure. Once it has
        started, the send completes even if the awaiting task is cancelled."""


async def adispatch_call(
    dispatcher: Dispatcher, key: CanonicalKey, queue: str = DEFAULT_QUEUE
) -> None:
    """``dispatch_call`` for an event loop: the dispatcher's own ``asend_attempt`` when it
    has one, else ``dispatch_call`` on a default-executor thread (a blocking publish)."""
    if isinstance(dispatcher, AsyncAttemptSender):
        await dispatcher.asend_attempt(key, attempt=1, queue=queue)
    else:
        await asyncio.to_thread(dispatch_call, dispatcher, key, queue)


class _Running:
    """One call whose steps run on a background thread."""

    __slots__ = ("done", "outcome")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.outcome: ToolOutcome | None = None


class InProcessDispatcher:
    """Runs the execute and project steps in this process, without a broker.

    For tests and embedded use: no time limit is enforced on the tool beyond its
    ``timeout_s`` (Celery's time limit does that for ``CeleryDispatcher``).

    Args:
        store: the store the steps read and seal.
        registry: the tools.
        inline: run both steps inside ``dispatch`` (``submit`` returns once the call is
            sealed; a wait can then never be shorter than the call). By default they run on
            a daemon thread per call, so ``invoke(timeout=...)`` and ``outcome`` answer on
            time while a tool still runs.
    """

    def __init__(self, store: CanonicalStore, registry: ToolRegistry, *, inline: bool = False):
        self._store = store
        self._registry = registry
        self.inline = inline
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}

    def _run_steps(
        self, key: CanonicalKey, attempt: int = 1, carrier: object = None
    ) -> ToolOutcome | None:
        # The same spans and figures as a worker's steps, in the caller's trace.
        terms = AttemptTerms(sender=self)
        with telemetry.worker_step(telemetry.EXECUTE, key, carrier):
            executed = execute_step(self._store, self._registry, key, attempt=attempt, terms=terms)
        if executed is ExecuteResult.HANDED_ON:
            return None  # the next attempt projects the call
        with telemetry.worker_step(telemetry.PROJECT, key, carrier) as step:
            outcome = project_step(self._store, self._registry, key)
            step.outcome(outcome)
        return outcome

    def dispatch(self, key: CanonicalKey) -> None:
        self.send_attempt(key, attempt=1, queue=DEFAULT_QUEUE)

    def send_attempt(
        self, key: CanonicalKey, *, attempt: int, queue: str, countdown_s: float = 0.0
    ) -> None:
        """Runs attempt ``attempt`` (queues mean nothing in one process); a retry's backoff
        is waited on its own thread."""
        if self.inline and not countdown_s:
            self._run_steps(key, attempt)
            return
        running = _Running()
        with self._lock:
            self._running[key.identity] = running
        thread = threading.Thread(
            target=self._background,
            # A new thread starts with no trace context: the caller's goes along.
            args=(key, running, attempt, countdown_s, telemetry.trace_headers()),
            name="tb-inprocess",
            daemon=True,
        )
        thread.start()

    def _background(
        self,
        key: CanonicalKey,
        running: _Running,
        attempt: int,
        countdown_s: float,
        carrier: object,
    ) -> None:
        try:
            if countdown_s:
                time.sleep(countdown_s)
            running.outcome = self._run_steps(key, attempt, carrier)
        except Exception:
            # A store failure under the steps: the record stays PROJECTING until the reaper
            # seals it, exactly as when a Celery worker's store fails.
            logger.warning("in-process steps of %s failed", key.identity)
        finally:
            with self._lock:
                if self._running.get(key.identity) is running:
                    del self._running[key.identity]
            running.done.set()

    def wait(self, key: CanonicalKey, timeout: float | None) -> bool:
        """True once the call's steps ran here and projected it, within ``timeout``."""
        with self._lock:
            running = self._running.get(key.identity)
        if running is None:
            # Not running here (finished, inline, or dispatched elsewhere): the record answers.
            return False
        return running.done.wait(timeout) and running.outcome is not None
