"""How accepted calls reach execution: the ``Dispatcher`` protocol and an in-process one."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from boundary.models import CanonicalKey
from boundary.registry import ToolRegistry
from boundary.steps import execute_step, project_step
from boundary.store.base import CanonicalStore


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


class InProcessDispatcher:
    """Runs the execute and project steps in the caller's thread, at dispatch.

    For tests and embedded use: no time limit is enforced on the tool (Celery's soft time
    limit does that for ``CeleryDispatcher``).
    """

    def __init__(self, store: CanonicalStore, registry: ToolRegistry) -> None:
        self._store = store
        self._registry = registry

    def dispatch(self, key: CanonicalKey) -> None:
        execute_step(self._store, self._registry, key)
        project_step(self._store, self._registry, key)

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        # Everything happened at dispatch: the record already holds the outcome.
        return None
