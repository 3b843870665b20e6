"""The dispatcher's publisher on a Redis broker keeps one client for its publishes (kombu
builds a ``redis.Redis`` per publish otherwise), and still publishes after the broker
restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from boundary import CanonicalKey
from tasks import CeleryDispatcher
from tasks.wiring.app import TOOLS_QUEUE, create_app
from tests.conftest import celery_test_settings
from tests.support.servers import redis_server


def test_publishes_share_one_client_and_survive_a_broker_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with redis_server(tmp_path / "broker") as broker:
        settings = celery_test_settings(broker_url=broker.url)
        dispatcher = CeleryDispatcher(create_app(settings, name="tests_publisher"))
        dispatcher.dispatch(CanonicalKey(run_id="run-p", tool_call_id="c0"))
        # (Each send's task-sent event is let out before the next send: the event thread
        # then always takes the producer the sends use, rather than a second one of the pool
        # that a send holds at that moment, which would make one more client, once.)
        assert dispatcher.sent_events.flush(10)
        # Given a publisher that has sent once, and a count of the Redis clients made since
        made = 0
        init = redis.Redis.__init__

        def counted(self: redis.Redis, *args: Any, **kwargs: Any) -> None:
            nonlocal made
            made += 1
            init(self, *args, **kwargs)

        monkeypatch.setattr(redis.Redis, "__init__", counted)
        # When it sends three more calls
        for n in range(1, 4):
            dispatcher.dispatch(CanonicalKey(run_id="run-p", tool_call_id=f"c{n}"))
            assert dispatcher.sent_events.flush(10)
        # Then no client was made for them, and every message is queued
        assert made == 0
        assert broker.client().llen(TOOLS_QUEUE) == 4
        # And after the broker restarts (its queue lost: no persistence), a send still lands
        broker.restart()
        dispatcher.dispatch(CanonicalKey(run_id="run-p", tool_call_id="c4"))
        assert broker.client().llen(TOOLS_QUEUE) == 1
