"""The canonical record as the project task's result: no second copy in the result backend.

The project task stores no Celery result (``ignore_result``): the record it seals is the
only place a call's outcome is written. ``AsyncResult("<run_id>:<tool_call_id>:project")``
still answers, from the record: the backend of our apps (``BoundaryCelery``) is the
configured one (Redis, Sentinel, ...) with ``RecordResults`` mixed in, which reads those
task ids' state from the canonical record and wakes ``.get()`` on the record's seal
notification (``RedisCanonicalStore.watch_seal``). Every other task id (reaper, reproject
chunks) goes to the configured backend unchanged.

For a project task id:

- PENDING while the record is PROJECTING (or unknown);
- SUCCESS with the bounded outcome (``ToolOutcome.model_dump(mode="json")``) once READY;
- FAILURE carrying ``ToolCallFailed(<code>)`` and no traceback once ERROR (the task itself
  still raises it, so the ``task-failed`` event and Flower list it among the failed).

Nothing is cached: the record decides each time (an expired record's ids may be reused by a
new call, which a cached result would answer for).
"""

from __future__ import annotations

import threading
from typing import Any
from weakref import WeakKeyDictionary

from celery import Celery, states
from celery.app.backends import by_url
from celery.exceptions import TimeoutError as CeleryTimeoutError
from pydantic import ValidationError

from boundary import CanonicalKey, CanonicalRecord, RedisCanonicalStore, ToolOutcome
from boundary.call_steps import give_up_at, time_left
from boundary.waits import on_seal, polling, wait_sealed
from tasks.settings import Settings
from tasks.wiring.failures import ToolCallFailed

#: Longest wait on the seal notification before the record is read again, seconds (a missed
#: wake-up costs at most this).
SLICE_S = 1.0
#: Longest pause between two record reads when no seal notification can be had, seconds.
POLL_S = 0.05
#: Suffix of the project task's id (``CanonicalKey.task_id("project")``).
PROJECT_SUFFIX = ":project"

_lock = threading.Lock()
#: Settings of the apps made by ``tasks.wiring.app.create_app``, to reach their store.
_settings_of: WeakKeyDictionary[Celery, Settings] = WeakKeyDictionary()
_stores: WeakKeyDictionary[Celery, RedisCanonicalStore] = WeakKeyDictionary()


def register_settings(app: Celery, settings: Settings) -> None:
    """``app``'s project results are read from the store ``settings`` name."""
    with _lock:
        _settings_of[app] = settings
        _stores.pop(app, None)


def record_store(app: Celery) -> RedisCanonicalStore:
    """The store holding the records of ``app``'s calls: the one of the settings it was made
    with, else the process's (``tasks.runtime``)."""
    from tasks.runtime import get_runtime, store_from_settings

    with _lock:
        store = _stores.get(app)
        if store is not None:
            return store
        settings = _settings_of.get(app)
        if settings is None:
            return get_runtime().store
        store = _stores[app] = store_from_settings(settings)
        return store


def project_key(task_id: Any) -> CanonicalKey | None:
    """The call whose project task has id ``task_id``, or ``None`` for any other task."""
    if not isinstance(task_id, str) or not task_id.endswith(PROJECT_SUFFIX):
        return None
    run_id, _, tool_call_id = task_id[: -len(PROJECT_SUFFIX)].partition(":")
    try:
        return CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)
    except ValidationError:
        return None


def _meta(task_id: str, status: str, result: Any) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "status": status,
        "result": result,
        "traceback": None,
        "children": [],
        "date_done": None,
    }


def _outcome_meta(key: CanonicalKey, outcome: ToolOutcome | None) -> dict[str, Any]:
    """The project task's Celery meta for the call's outcome (``None``: still PROJECTING)."""
    task_id = key.task_id("project")
    if outcome is None:
        return _meta(task_id, states.PENDING, None)
    if outcome.error_code is not None:
        return _meta(task_id, states.FAILURE, ToolCallFailed(outcome.error_code.value))
    return _meta(task_id, states.SUCCESS, outcome.model_dump(mode="json"))


class RecordResults:
    """Mixed into a Celery result backend: project task ids are answered from the record."""

    app: Any

    def record_meta(self, key: CanonicalKey) -> dict[str, Any]:
        """The project task's Celery meta, as the record now says."""
        record = record_store(self.app).get(key, with_raw=False)
        return _outcome_meta(key, None if record is None else ToolOutcome.from_record(record))

    def wait_record(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        """The project task's meta once the record is sealed, waiting at most ``timeout``
        seconds (``None``: no limit); ``None`` when it is not sealed by then.

        Watches the seal notification first, then reads the record (``wait_sealed``, the
        one loop of every blocking wait), so a seal is either seen by the read or wakes the
        wait. Every step is cut to the time left; without a notification (RESP3, or its
        connection failing) the record is read every ``POLL_S``. A missing record is a task
        still PENDING, as Celery answers for an unknown task id: waited on.
        """
        give_up = give_up_at(timeout)
        store = record_store(self.app)

        def read() -> ToolOutcome | CanonicalRecord | None:
            record = store.get(key, with_raw=False)
            return None if record is None else ToolOutcome.from_record(record) or record

        watch = store.watch_seal(key)
        try:
            if watch is not None:
                left = time_left(give_up)
                watch.attach(SLICE_S if left is None else min(SLICE_S, left))
            outcome = wait_sealed(
                read,
                polling(POLL_S) if watch is None else on_seal(watch),
                lambda record: None,
                give_up=give_up,
                slice_s=SLICE_S,
            )
        finally:
            if watch is not None:
                watch.__exit__()
        return None if outcome is None else _outcome_meta(key, outcome)

    # -- Celery's backend API, for project task ids --

    def get_task_meta(self, task_id: str, cache: bool = True) -> dict[str, Any]:
        key = project_key(task_id)
        if key is None:
            return super().get_task_meta(task_id, cache)  # type: ignore[misc,no-any-return]
        return self.record_meta(key)

    def _get_task_meta_for(self, task_id: str) -> dict[str, Any]:
        key = project_key(task_id)
        if key is None:
            return super()._get_task_meta_for(task_id)  # type: ignore[misc,no-any-return]
        return self.record_meta(key)

    def add_pending_result(self, result: Any, *args: Any, **kwargs: Any) -> Any:
        if project_key(result.id) is None:
            return super().add_pending_result(result, *args, **kwargs)  # type: ignore[misc]
        return result

    def remove_pending_result(self, result: Any) -> Any:
        if project_key(result.id) is None:
            return super().remove_pending_result(result)  # type: ignore[misc]
        return result

    def wait_for_pending(
        self,
        result: Any,
        callback: Any = None,
        propagate: bool = True,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> Any:
        key = project_key(result.id)
        if key is None:
            return super().wait_for_pending(  # type: ignore[misc]
                result, callback=callback, propagate=propagate, timeout=timeout, **kwargs
            )
        meta = self.wait_record(key, timeout)
        if meta is None:
            raise CeleryTimeoutError("The operation timed out.")
        result._maybe_set_cache(meta)
        return result.maybe_throw(callback=callback, propagate=propagate)


_record_classes: dict[type, type] = {}


def record_backend_class(backend: type) -> type:
    """``backend`` with ``RecordResults`` mixed in (one class per backend class)."""
    with _lock:
        made = _record_classes.get(backend)
        if made is None:
            made = type(f"Record{backend.__name__}", (RecordResults, backend), {})
            _record_classes[backend] = made
        return made


class BoundaryCelery(Celery):  # type: ignore[misc]
    """A Celery app whose result backend answers project task ids from the record.

    The configured ``result_backend`` URL is left as it is (its password stays masked
    wherever Celery prints it); only the class made from it gains ``RecordResults``.
    """

    def _get_backend(self) -> Any:
        backend, url = by_url(self.backend_cls or self.conf.result_backend, self.loader)
        return record_backend_class(backend)(app=self, url=url)

    def send_task(self, name: str, *args: Any, **options: Any) -> Any:
        """Sends as Celery does; a task annotated ``send_events: False`` (the reaper's, unless
        ``TOOL_BOUNDARY_REAP_EVENTS``) is sent without its task-sent event either."""
        if name in _quiet_tasks(self) and options.get("event_dispatcher") is None:
            options["event_dispatcher"] = _NoEvents()
        return super().send_task(name, *args, **options)


class _NoEvents:
    """An event dispatcher that publishes nothing."""

    def publish(self, *args: Any, **kwargs: Any) -> None:
        return None


#: Each app's quiet tasks, with the ``task_annotations`` they were read from.
_quiet_of: WeakKeyDictionary[Celery, tuple[object, frozenset[str]]] = WeakKeyDictionary()


def _quiet_tasks(app: Celery) -> frozenset[str]:
    """Tasks whose annotation turns their events off.

    Read once per ``task_annotations`` value (every send asks, also a worker's send of each
    chained project step): read again when the setting is replaced (``configure``, a
    ``conf.update``), not when the mapping it names is changed in place (Celery applies
    annotations once too, when it binds a task)."""
    annotations = app.conf.get("task_annotations")
    known = _quiet_of.get(app)
    if known is not None and known[0] is annotations:
        return known[1]
    quiet = frozenset(
        name
        for name, options in (annotations.items() if isinstance(annotations, dict) else ())
        if isinstance(options, dict) and options.get("send_events") is False
    )
    with _lock:
        _quiet_of[app] = (annotations, quiet)
    return quiet
