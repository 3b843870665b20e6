"""A store whose Redis stops answering (SIGSTOP: the kernel still accepts connections, Redis
answers nothing): a submit, an outcome read and a heartbeat each give up on their own bound
(``docs/explanation/waits.md``, "When Redis stops answering") instead of waiting for Redis to
come back.

Each call runs on a thread while the server stays paused; the test waits for it at most
``GIVE_UP_S`` (a call that waited for Redis would never return while it is paused), then
checks what it answered, then resumes the server. How long each took is bench figures
(``python -m bench.studies.chaos.paused``), not asserted here.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from boundary import (
    ErrorCode,
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    ToolBoundary,
    ToolRegistry,
    ToolSpec,
    heartbeat,
)
from boundary.flow import Flow
from tests.support.helpers import FakeProjector, envelope, make_run, wait_until
from tests.support.servers import RedisServer, redis_server

#: Bound of the wait for one call while the store is paused (the bounds are a few seconds).
GIVE_UP_S = 60.0

T = TypeVar("T")

#: Set by the tool once it runs; it then heartbeats each time ``BEAT`` is set.
RUNNING = threading.Event()
BEAT = threading.Event()
BEATEN = threading.Event()
FINISH = threading.Event()


def beating_tool(arguments: dict[str, Any]) -> dict[str, Any]:
    RUNNING.set()
    while not FINISH.is_set():
        if BEAT.wait(0.05):
            BEAT.clear()
            heartbeat(progress=0.5, message="half way")
            BEATEN.set()
    return {"hits": [{"id": "beaten"}]}


@pytest.fixture
def paused_setup(tmp_path: Path) -> Iterator[tuple[RedisServer, ToolBoundary]]:
    for event in (RUNNING, BEAT, BEATEN, FINISH):
        event.clear()
    with redis_server(tmp_path / "store", "--appendonly", "no") as server:
        store = RedisCanonicalStore.from_url(server.url, ttl_s=600)
        registry = ToolRegistry(
            [
                ToolSpec(
                    name="search",
                    executor=beating_tool,
                    projector=FakeProjector(),
                    read_only=True,
                    timeout_s=120,
                )
            ]
        )
        boundary = ToolBoundary(
            store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
        )
        # Flow control's list of run-time overrides, read now and kept: its read once a second
        # (off the caller's path, on a connection of its own) is not the submit's round trip.
        flow = store.flow
        assert isinstance(flow, Flow)
        flow.refresh_overrides()
        flow.overrides_ttl_s = 3600
        store.client.connection_pool.disconnect()  # (that read's connection: not the submit's)
        try:
            yield server, boundary
        finally:
            FINISH.set()
            server.resume()


def returns_while_paused(server: RedisServer, call: Callable[[], T]) -> T:
    """``call()``'s answer, made on a thread while ``server`` stays paused; fails the test if
    it does not return within ``GIVE_UP_S`` (it would be waiting for the server)."""
    answers: list[T] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    server.pause()
    thread.start()
    thread.join(GIVE_UP_S)
    assert answers, "the call waited for the paused Redis"
    return answers[0]


def connections_received(server: RedisServer) -> Callable[[], int]:
    """A counter of the connections ``server`` has accepted, read on a connection opened now
    (so reading it later opens none)."""
    admin = server.client(socket_timeout=GIVE_UP_S)

    def read() -> int:
        return int(admin.info("stats")["total_connections_received"])

    read()
    return read


def test_a_submit_to_a_paused_store_answers_store_unavailable(
    paused_setup: tuple[RedisServer, ToolBoundary],
) -> None:
    server, boundary = paused_setup
    received = connections_received(server)
    before = received()
    # Given a store whose Redis stopped answering
    # When a call is submitted
    submission = returns_while_paused(server, lambda: boundary.submit(envelope("c1"), make_run()))
    # Then it is refused, retryable, and nothing was run
    assert not submission.accepted
    assert submission.outcome is not None
    assert submission.outcome.error_code is ErrorCode.STORE_UNAVAILABLE
    assert ErrorCode.STORE_UNAVAILABLE.retryable
    assert not RUNNING.is_set()
    # And it gave up after one unanswered round trip: it opened one connection, not a second
    # one to try again (the memory reading's silence used to be followed by the create's)
    server.resume()
    assert received() - before == 1


def test_an_async_submit_to_a_paused_store_answers_store_unavailable(
    paused_setup: tuple[RedisServer, ToolBoundary],
) -> None:
    server, boundary = paused_setup
    received = connections_received(server)
    before = received()

    def asubmit() -> Any:
        return asyncio.run(boundary.asubmit(envelope("c1"), make_run()))

    submission = returns_while_paused(server, asubmit)
    assert not submission.accepted
    assert submission.outcome.error_code is ErrorCode.STORE_UNAVAILABLE
    server.resume()
    assert received() - before == 1


@pytest.mark.parametrize("timeout", [0.2, 3.0])
def test_an_outcome_read_from_a_paused_store_answers_store_unavailable(
    paused_setup: tuple[RedisServer, ToolBoundary], timeout: float
) -> None:
    server, boundary = paused_setup
    # Given a running call
    assert boundary.submit(envelope("c1"), make_run()).accepted
    assert RUNNING.wait(GIVE_UP_S)
    # When its outcome is read while the store answers nothing
    outcome = returns_while_paused(server, lambda: boundary.outcome("run-1", "c1", timeout))
    # Then the read answers STORE_UNAVAILABLE (not PROJECTING: the store said nothing)
    assert outcome.error_code is ErrorCode.STORE_UNAVAILABLE
    # And once the store answers again the call ends READY
    server.resume()
    FINISH.set()
    assert boundary.outcome("run-1", "c1", timeout=GIVE_UP_S).status is InvocationStatus.READY


def test_an_async_outcome_read_from_a_paused_store_answers_store_unavailable(
    paused_setup: tuple[RedisServer, ToolBoundary],
) -> None:
    server, boundary = paused_setup
    assert boundary.submit(envelope("c1"), make_run()).accepted
    assert RUNNING.wait(GIVE_UP_S)

    def aoutcome() -> Any:
        return asyncio.run(boundary.aoutcome("run-1", "c1", timeout=0.2))

    outcome = returns_while_paused(server, aoutcome)
    assert outcome.error_code is ErrorCode.STORE_UNAVAILABLE


def test_a_heartbeat_to_a_paused_store_returns_and_the_tool_goes_on(
    paused_setup: tuple[RedisServer, ToolBoundary],
) -> None:
    server, boundary = paused_setup
    # Given a tool running a call
    assert boundary.submit(envelope("c1"), make_run()).accepted
    assert RUNNING.wait(GIVE_UP_S)
    # When it heartbeats while the store answers nothing
    BEAT.set()
    beaten = returns_while_paused(server, lambda: BEATEN.wait(GIVE_UP_S))
    # Then the heartbeat returned into the tool (no exception: the tool goes on)
    assert beaten
    # And the call ends READY once the store answers again
    server.resume()
    FINISH.set()
    wait_until(
        lambda: boundary.outcome("run-1", "c1", timeout=1).status is InvocationStatus.READY,
        "the call to end READY",
        patience=GIVE_UP_S,
    )


#: A store client's socket (and connect) timeout longer than any wait of these tests: a read
#: that waits for it ignored its caller's timeout (the defaults, 5 s and 2 s, are only a few
#: seconds past a wait's).
LONG_SOCKET_TIMEOUT_S = 120.0
#: A wait this much past its timeout ignored it (it waited for the socket timeout): only a
#: broken wait reaches it, never a slow machine. How late waits are is bench figures.
IGNORED_S = 60.0


@pytest.mark.parametrize("waiter", ["sync", "async"])
def test_an_outcome_wait_on_a_paused_store_ends_by_its_own_timeout(
    paused_setup: tuple[RedisServer, ToolBoundary], waiter: str
) -> None:
    server, boundary = paused_setup
    # Given a running call, and a boundary whose store client would wait for a silent Redis
    # far longer than the caller's timeout
    assert boundary.submit(envelope("c1"), make_run()).accepted
    assert RUNNING.wait(GIVE_UP_S)
    slow = RedisCanonicalStore.from_url(
        server.url,
        ttl_s=600,
        socket_timeout=LONG_SOCKET_TIMEOUT_S,
        socket_connect_timeout=LONG_SOCKET_TIMEOUT_S,
    )
    waiting = ToolBoundary(
        store=slow,
        registry=boundary.registry,
        dispatcher=InProcessDispatcher(slow, boundary.registry),
    )
    assert waiting.outcome("run-1", "c1", timeout=0).pending

    def wait() -> tuple[Any, float]:
        started = time.monotonic()
        if waiter == "sync":
            outcome = waiting.outcome("run-1", "c1", timeout=1.0)
        else:
            outcome = asyncio.run(waiting.aoutcome("run-1", "c1", timeout=1.0))
        return outcome, time.monotonic() - started

    # When its outcome is awaited for 1 s while the store answers nothing
    outcome, took = returns_while_paused(server, wait)
    # Then the wait ends on its own timeout, answering STORE_UNAVAILABLE: not on the client's
    # socket timeout
    assert outcome.error_code is ErrorCode.STORE_UNAVAILABLE
    assert took < IGNORED_S, f"the wait ignored its timeout: {took:.1f} s"
    print(f"{waiter} outcome(timeout=1) on a paused store returned after {took:.2f} s")
