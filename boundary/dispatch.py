"""How accepted calls reach execution: the ``Dispatcher`` protocol and an in-process one."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol, runtime_checkable

from boundary import telemetry
from boundary.models import CanonicalKey, ToolOutcome
from boundary.registry import ToolRegistry
from boundary.steps import execute_step, project_step
from boundary.store.base import CanonicalStore

logger = logging.getLogger(__name__)


@runtime_checkable
class Dispatcher(Protocol):
    """Hands an accepted call to execution, and answers for its projected outcome."""

    def dispatch(self, key: CanonicalKey) -> None:
        """Starts the call; raises when it cannot be handed over."""

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        """The projected outcome as a dict, or ``None`` when the backend has none (gone,
        never written, or not ready within ``timeout``); the caller then reads the record."""


@runtime_checkable
class Revoker(Protocol):
    """A dispatcher that can also withdraw a call's queued work (optional)."""

    def revoke(self, key: CanonicalKey) -> None:
        """Stops the call's steps that have not started; raises when it cannot reach them."""


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

    def _run_steps(self, key: CanonicalKey, carrier: object = None) -> ToolOutcome | None:
        # The same spans and figures as a worker's steps, in the caller's trace.
        with telemetry.worker_step(telemetry.EXECUTE, key, carrier):
            execute_step(self._store, self._registry, key)
        with telemetry.worker_step(telemetry.PROJECT, key, carrier) as step:
            outcome = project_step(self._store, self._registry, key)
            step.outcome(outcome)
        return outcome

    def dispatch(self, key: CanonicalKey) -> None:
        if self.inline:
            self._run_steps(key)
            return
        running = _Running()
        with self._lock:
            self._running[key.identity] = running
        thread = threading.Thread(
            target=self._background,
            # A new thread starts with no trace context: the caller's goes along.
            args=(key, running, telemetry.trace_headers()),
            name="tb-inprocess",
            daemon=True,
        )
        thread.start()

    def _background(self, key: CanonicalKey, running: _Running, carrier: object) -> None:
        try:
            running.outcome = self._run_steps(key, carrier)
        except Exception:
            # A store failure under the steps: the record stays PROJECTING until the reaper
            # seals it, exactly as when a Celery worker's store fails.
            logger.warning("in-process steps of %s failed", key.identity)
        finally:
            with self._lock:
                self._running.pop(key.identity, None)
            running.done.set()

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        with self._lock:
            running = self._running.get(key.identity)
        if running is None:
            # Not running here (finished, inline, or dispatched elsewhere): the record answers.
            return None
        if not running.done.wait(timeout) or running.outcome is None:
            return None
        return running.outcome.model_dump(mode="json")
