"""The fair peer with our worker's event spacing (``bench.peers.events``): its bootstep reads
the interval from the same setting as ours and, like ours, leaves Celery's own sending alone
at ``0``; ``space_events`` loads it into an app's consumer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery import Celery

from bench.peers.events import PeerSpacedEventFlush, space_events


def _consumer() -> SimpleNamespace:
    return SimpleNamespace(hub=object(), _flush_events_promise=None, event_dispatcher=None)


def test_the_peer_step_spaces_events_at_our_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the workers' event spacing setting at 5 ms
    monkeypatch.setenv("TOOL_BOUNDARY_WORKER_EVENTS_FLUSH_MS", "5")
    consumer = _consumer()

    # When the peer's step starts in a consumer with an event loop
    step = PeerSpacedEventFlush(consumer)
    step.start(consumer)

    # Then it takes over the dispatcher's flush, at our interval
    assert step.interval_s == pytest.approx(0.005)
    assert consumer._flush_events_promise is not None


def test_the_peer_step_at_zero_leaves_celerys_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the spacing off
    monkeypatch.setenv("TOOL_BOUNDARY_WORKER_EVENTS_FLUSH_MS", "0")
    consumer = _consumer()

    # When the step starts
    PeerSpacedEventFlush(consumer).start(consumer)

    # Then Celery's own flush stays
    assert consumer._flush_events_promise is None


def test_space_events_adds_the_step_to_the_apps_consumer() -> None:
    app = space_events(Celery("peer-events-test"))
    assert PeerSpacedEventFlush in app.steps["consumer"]
