"""The worker process's own objects, made once per process: its sender of calls (retries,
slots handed on), its runtime with flow control installed, the terms its execute steps run
attempts under, its reporter of heartbeats (``task-progress`` events) and its one sender of
project steps."""

from __future__ import annotations

from boundary.flow import Flow
from boundary.steps.attempts import AttemptTerms
from tasks.runtime import Runtime, get_runtime
from tasks.wiring.app import app
from tasks.wiring.dispatcher import CeleryDispatcher
from tasks.worker import chunk_slots
from tasks.worker.progress_events import ProgressEvents
from tasks.worker.project_sender import ProjectSender

__all__ = [
    "attempt_sender",
    "attempt_terms",
    "progress_events",
    "project_sender",
    "worker_runtime",
]

_sender: CeleryDispatcher | None = None
#: Heartbeats of the calls this process runs, sent as ``task-progress`` events (Flower);
#: made the process's progress listener by ``tasks.worker.signals``.
progress_events = ProgressEvents(app)


def attempt_sender() -> CeleryDispatcher:
    """This process's sender of calls: retries, slots handed on, the execute tasks' project
    steps (made on first use, after the worker's config)."""
    global _sender
    if _sender is None:
        _sender = CeleryDispatcher(app)
    return _sender


#: The one sender of this process's project steps (``tasks.worker.project_sender``), on its
#: sender of calls.
project_sender = ProjectSender(app, attempt_sender)


def worker_runtime() -> Runtime:
    """The process's runtime, its store's flow control installed (the calls it hands a slot
    are sent by this process's sender)."""
    runtime = get_runtime()
    flow = runtime.store.flow
    if flow is None:
        flow = Flow.install(runtime.store, runtime.registry, attempt_sender())
    elif isinstance(flow, Flow) and flow.sender is not attempt_sender():
        # Installed by a caller in this process first (a boundary made on the same store):
        # in a worker, the calls handed a slot go out through the worker's own sender.
        flow.sender = attempt_sender()
    if isinstance(flow, Flow):
        # The cap of re-projection chunks: its slots, its line and its sweep.
        chunk_slots.reserve(flow, runtime.settings)
    return runtime


#: The terms last made, kept while the sender and the settings they come from are the same.
_terms: AttemptTerms | None = None


def attempt_terms() -> AttemptTerms:
    """How this process's execute steps run an attempt (``AttemptTerms``, frozen): made once,
    again only when the sender or one of the settings it carries changed."""
    global _terms
    settings = get_runtime().settings
    sender = attempt_sender()
    terms = _terms
    if (
        terms is None
        or terms.sender is not sender
        or terms.max_pending_s != settings.max_pending_s
        or terms.reap_grace_s != settings.reap_grace_s
        or terms.heartbeat_interval_s != settings.heartbeat_interval_s
    ):
        terms = _terms = AttemptTerms(
            sender=sender,
            max_pending_s=settings.max_pending_s,
            reap_grace_s=settings.reap_grace_s,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            # The watchdog's early send of the project step (``ProjectSender.send_early``).
            project_now=project_sender.send_early,
        )
    return terms
