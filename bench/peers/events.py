"""The worker's event spacing (``tasks.worker.event_flush``) for the bare peers, so ours and a
peer can be measured with the same task-event handling (like for like).

Our workers send their task events at most once per ``worker_events_flush_ms`` (a consumer
bootstep any Celery app can carry); a stock Celery worker sends them at nearly every turn of
its event loop. ``PeerSpacedEventFlush`` is that bootstep reading the interval from the same
setting (``TOOL_BOUNDARY_WORKER_EVENTS_FLUSH_MS``, which the bench passes to every worker)
without our worker's runtime (no store, no tool registry): ``bench.peers.bare_spaced`` loads
it into the bare peer's app.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from vine import promise

from tasks.settings import Settings
from tasks.worker.event_flush import SpacedEventFlush


class PeerSpacedEventFlush(SpacedEventFlush):
    """``SpacedEventFlush``, its interval from the settings rather than our runtime."""

    def start(self, c: Any) -> None:
        self.interval_s = Settings().worker_events_flush_ms / 1000
        if c.hub is None or self.interval_s <= 0:
            return
        self.timer = None
        c._flush_events_promise = promise(self._flush_soon, (c,))


def space_events(celery_app: Celery) -> Celery:
    """Loads the spacing bootstep into ``celery_app``'s consumer; returns the app."""
    celery_app.steps["consumer"].add(PeerSpacedEventFlush)
    return celery_app
