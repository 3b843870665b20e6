"""``worker_events_flush_ms``: a real worker subprocess sends its buffered task events at most
once per interval, together (``task.multi``), and every event of every task still arrives."""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from boundary import RunContext
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import create_app
from tests.celery.conftest import RUN
from tests.celery.event_stream import receiving
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.helpers import envelope, wait_until

pytestmark = pytest.mark.slow

#: Longest wait for a call's outcome, and for its events, seconds (bounds, not timings).
CALL_TIMEOUT_S = 30.0
#: A spacing long enough that a turn's events cannot each leave alone.
FLUSH_MS = 1000.0
CALLS = 8
#: Events Celery's dispatcher buffers before it sends them whatever the spacing.
BUFFER_LIMIT = 24
#: The worker's pool threads (``worker_args``' default concurrency).
CONCURRENCY = 4


@contextmanager
def task_events(
    app: Celery,
) -> Iterator[tuple[Counter[tuple[str, str]], list[tuple[float, int]]]]:
    """Task events seen on ``app``'s broker while the block runs, by (task id, type), and
    for each message that carried a worker's buffered task events, when it arrived
    (monotonic) and how many events it carried."""
    seen: Counter[tuple[str, str]] = Counter()
    messages: list[tuple[float, int]] = []

    def arrived(body: Any) -> None:
        events = body if isinstance(body, list) else [body]
        if any(e.get("type") in _KINDS for e in events):
            messages.append((time.monotonic(), len(events)))

    handlers = {"*": lambda e: seen.update([(e.get("uuid", ""), e["type"])])}
    with receiving(app, handlers, arrived):
        yield seen, messages


def test_a_turns_task_events_all_arrive_and_leave_together(
    celery_session_app: Celery, tmp_path: Path
) -> None:
    # Given a worker that spaces its event sends a second apart
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), worker_events_flush_ms=FLUSH_MS
    )
    broker = flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_event_flush")
    try:
        with (
            celery_process(settings, *worker_args("event-flush"), log=tmp_path / "worker.log"),
            task_events(app) as (seen, messages),
        ):
            boundary = get_runtime().boundary(CeleryDispatcher(app))
            run = RunContext(
                run_id=f"run-flush-{uuid.uuid4().hex[:8]}", authorized_tools=RUN.authorized_tools
            )
            # When a turn of calls runs (each an execute task and a project task)
            envelopes = [
                envelope(f"flush-{n}", {"query": f"q{n}"}, run_id=run.run_id, tool_name="lookup")
                for n in range(CALLS)
            ]
            outcomes = boundary.invoke_many(envelopes, run, timeout=CALL_TIMEOUT_S)
            assert [o.status for o in outcomes] == ["READY"] * CALLS, [
                o.error_code for o in outcomes
            ]
            tasks = [
                f"{run.run_id}:{e.tool_call_id}:{step}"
                for e in envelopes
                for step in ("execute", "project")
            ]
            wanted = [(task, kind) for task in tasks for kind in _KINDS]

            # Then every task's received, started and succeeded events arrive, once each
            _wait_for(lambda: all(seen[w] == 1 for w in wanted), CALL_TIMEOUT_S)
            # and the worker sent them at most once a second: its first send, then one a
            # second (one more for the arrival's jitter), and what a full buffer sends
            # (Celery sends 24 buffered events at once, and every pool thread or the
            # consumer that buffered one while that send was writing sends again behind
            # it); not one at nearly every event
            spell_s = messages[-1][0] - messages[0][0]
            full = sum(1 for _, size in messages if size >= BUFFER_LIMIT)
            assert full <= math.ceil(len(wanted) / BUFFER_LIMIT), messages
            bound = math.ceil(spell_s * 1000 / FLUSH_MS) + 2 + full * (1 + CONCURRENCY)
            assert len(messages) <= bound, messages
    finally:
        broker.flushdb()


_KINDS = ("task-received", "task-started", "task-succeeded")


def _wait_for(condition: Any, patience_s: float) -> None:
    wait_until(condition, "every task event", patience_s, every=0.05)
