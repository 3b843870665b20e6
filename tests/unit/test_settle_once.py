"""A late-ack task's message is acknowledged once, even when the watchdog's early ack (one
thread) and the task's own ack (another) race through Celery's ``Request.acknowledge()``,
whose check of ``acknowledged`` is not atomic. The suite's worker died of that race once:
the consumer's loop acked the message twice and ``MessageStateError`` stopped it."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from celery.worker.request import Request

from tasks.worker.pool import settle_once


def racing_request(calls: list[str], wait_s: float = 0.2) -> tuple[Any, threading.Barrier]:
    """Celery's own ``Request`` (its slots, its ``acknowledge``), whose ack callback waits
    (up to ``wait_s``) until two threads are inside it: both have passed the
    ``acknowledged`` check."""
    inside = threading.Barrier(2, timeout=wait_s)
    request: Any = object.__new__(Request)
    request.acknowledged = False
    request._connection_errors = ()

    def on_ack(logger: Any, errors: Any) -> None:
        calls.append("ack")
        # Broken when the other thread never got in (the guard held it out).
        with contextlib.suppress(threading.BrokenBarrierError):
            inside.wait()

    def on_reject(logger: Any, errors: Any, requeue: bool = False) -> None:
        calls.append("reject")

    request._on_ack = on_ack
    request._on_reject = on_reject
    return request, inside


def both_acknowledge(request: Any) -> None:
    threads = [threading.Thread(target=request.acknowledge) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)


def test_without_the_guard_two_threads_ack_one_message_twice() -> None:
    # Given Celery's Request as it is (the race the guard closes is real)
    calls: list[str] = []
    request, _ = racing_request(calls, wait_s=30)
    # When the early ack and the task's own ack run at once
    both_acknowledge(request)
    # Then both reached the message
    assert calls == ["ack", "ack"]


def test_with_the_guard_the_message_is_acknowledged_once() -> None:
    calls: list[str] = []
    request, _ = racing_request(calls)
    settle_once(request)
    both_acknowledge(request)
    assert calls == ["ack"]
    assert request.acknowledged is True


def test_a_reject_after_the_early_ack_does_nothing() -> None:
    calls: list[str] = []
    request, _ = racing_request(calls)
    settle_once(request)
    request._on_ack(None, ())  # the early ack
    request._on_reject(None, (), True)  # the task's failure path, racing it
    assert calls == ["ack"]


def test_a_request_without_celerys_callbacks_is_left_alone() -> None:
    settle_once(None)
    settle_once(object())
