"""``PublishThread``: an event loop's sends published from one dedicated thread, each send's
failure handed back to its own caller, a cancelled caller's send still published."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tasks.wiring.publish_thread import PublishThread


class Boom(Exception):
    pass


def test_every_send_runs_on_the_one_thread_and_gets_its_own_result() -> None:
    # Given a publishing thread and 50 sends from one loop, every 7th one failing
    publisher = PublishThread(name="tb-test-publisher")
    ran_on: set[int] = set()
    published: list[int] = []

    def publish(n: int) -> None:
        ran_on.add(threading.get_ident())
        if n % 7 == 0:
            raise Boom(n)
        published.append(n)

    async def body() -> list[BaseException | None]:
        sends = [publisher.asend(lambda n=n: publish(n)) for n in range(50)]
        return await asyncio.gather(*sends, return_exceptions=True)

    # When they are all awaited at once
    results = asyncio.run(body())
    publisher.close(timeout=5)

    # Then all ran on one thread that is not the loop's, each failure went to its own caller
    # only, and every other send was published once
    assert len(ran_on) == 1 and threading.get_ident() not in ran_on
    failed = [n for n, result in enumerate(results) if isinstance(result, Boom)]
    assert failed == [n for n in range(50) if n % 7 == 0]
    assert sorted(published) == [n for n in range(50) if n % 7 != 0]
    assert all(result is None for n, result in enumerate(results) if n not in failed)


def test_a_cancelled_caller_s_send_is_still_published() -> None:
    # Given a send held up on the publishing thread
    publisher = PublishThread(name="tb-test-publisher")
    release = threading.Event()
    published: list[str] = []

    def slow() -> None:
        release.wait(10)
        published.append("slow")

    async def body() -> None:
        task = asyncio.create_task(publisher.asend(slow))
        await asyncio.sleep(0.01)
        # When its caller is cancelled before the publish ends
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    asyncio.run(body())
    publisher.close(timeout=10)

    # Then the send was published all the same
    assert published == ["slow"]


def test_a_full_queue_sends_on_a_thread_of_its_own_and_close_drains_the_queue() -> None:
    # Given a publishing thread that holds one send at most, its thread busy with one
    publisher = PublishThread(name="tb-test-publisher", max_queued=1)
    release = threading.Event()
    published: list[str] = []

    def first() -> None:
        release.wait(10)
        published.append("first")

    async def body() -> None:
        queued = asyncio.create_task(publisher.asend(first))
        await asyncio.sleep(0.01)
        # When a second send comes while the first one holds the queue's only place
        await publisher.asend(lambda: published.append("overflow"))
        release.set()
        await queued

    asyncio.run(body())
    publisher.close(timeout=10)

    # Then the second was not refused nor lost: it went out on a thread of its own, first
    assert published == ["overflow", "first"]
    # And a closed publisher refuses new sends rather than queueing them for nobody
    with pytest.raises(RuntimeError):
        asyncio.run(publisher.asend(lambda: None))
