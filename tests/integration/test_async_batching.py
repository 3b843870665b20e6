"""The asyncio store sends the creates and reads asked for in one loop iteration as one
pipeline (``store/aio.py``'s batcher), on a real Redis: each caller gets its own reply, a
server that lost its scripts still creates, and a failed round trip fails every caller in it
with STORE_UNAVAILABLE, nothing raw."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import redis
import redis.asyncio.client as aclient

from boundary import Limits, RedisCanonicalStore
from boundary.errors import StoreUnavailable
from boundary.models import CanonicalKey
from boundary.store.aio import AsyncRedisStore
from boundary.store.base import CreateStatus, CreateTerms
from tests.conftest import REDIS_HOST

RUN = "run-batching"


def _terms(n: int) -> CreateTerms:
    return CreateTerms(
        tool_name="search_docs",
        request=f'{{"query":"q{n}"}}',
        deadline=None,
        max_pending_s=60.0,
        reap_grace_s=5.0,
        max_run_calls=None,
        max_tool_calls=None,
    )


def _key(n: int) -> CanonicalKey:
    return CanonicalKey(run_id=RUN, tool_call_id=f"call_{n}")


def _async(store: RedisCanonicalStore) -> AsyncRedisStore:
    got = store.async_store()
    assert isinstance(got, AsyncRedisStore)
    return got


def test_one_iteration_s_creates_and_reads_go_in_one_pipeline_each_with_its_reply(
    store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the pipelines the asyncio client executes, counted
    executed: list[int] = []
    original = aclient.Pipeline.execute

    async def counted(self: Any, raise_on_error: bool = True) -> Any:
        executed.append(len(self.command_stack))
        return await original(self, raise_on_error)

    monkeypatch.setattr(aclient.Pipeline, "execute", counted)

    async def body() -> tuple[list[Any], list[Any]]:
        aio = _async(store)
        # The memory watermark's INFO (time-cached) would split a batch where it reads again.
        aio.memory = None
        try:
            # When 30 creates (the last 10 repeat the first 10's ids) start at once
            numbers = [*range(20), *range(10)]
            created = await asyncio.gather(*(aio.create(_key(n), **_terms(n)) for n in numbers))
            # And then 21 reads, one of a call never created
            reads = await asyncio.gather(*(aio.get(_key(n)) for n in range(21)))
            return created, reads
        finally:
            await aio.aclose()

    created, reads = asyncio.run(body())

    # Then each create got its own answer: each id created once, its repeat a duplicate
    statuses = [c.status for c in created]
    assert statuses[10:20] == [CreateStatus.CREATED] * 10
    for n in range(10):
        assert {statuses[n], statuses[20 + n]} == {CreateStatus.CREATED, CreateStatus.DUPLICATE}
    # And each read its own record (the missing one: None)
    assert [r.key.tool_call_id for r in reads[:20]] == [f"call_{n}" for n in range(20)]
    assert reads[20] is None
    # And they went in one pipeline per iteration: the 30 creates in one, the 21 reads in one
    assert executed == [30, 21]


def test_a_server_that_lost_its_scripts_still_creates(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    async def body() -> list[Any]:
        aio = _async(store)
        try:
            await aio.create(_key(0), **_terms(0))
            # When the server forgets its scripts (a restart, SCRIPT FLUSH)
            redis_client.script_flush()
            return await asyncio.gather(*(aio.create(_key(n), **_terms(n)) for n in (1, 2)))
        finally:
            await aio.aclose()

    # Then the batch's creates load the script again and create
    assert [c.status for c in asyncio.run(body())] == [CreateStatus.CREATED] * 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((REDIS_HOST, 0))
        return int(probe.getsockname()[1])


def test_a_failed_round_trip_fails_every_caller_in_it_with_store_unavailable() -> None:
    # Given a store whose server does not answer (nothing listens on the port)
    client = redis.Redis(host=REDIS_HOST, port=_free_port(), socket_connect_timeout=1)
    store = RedisCanonicalStore(client=client, ttl_s=60, limits=Limits())

    async def body() -> list[Any]:
        aio = _async(store)
        try:
            # When several reads and creates go in one pipeline
            reads = [aio.get(_key(n)) for n in range(3)]
            creates = [aio.create(_key(n), **_terms(n)) for n in range(3)]
            return await asyncio.gather(*reads, *creates, return_exceptions=True)
        finally:
            await aio.aclose()

    # Then each caller gets STORE_UNAVAILABLE (our error, no driver text)
    results = asyncio.run(body())
    assert len(results) == 6
    assert all(isinstance(r, StoreUnavailable) for r in results), results


def test_creates_started_at_once_share_one_memory_reading(
    store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the asyncio client's INFO readings, counted, and a stale memory reading
    readings: list[str] = []
    original = aclient.Redis.info

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        readings.append(str(args[0]) if args else "")
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(aclient.Redis, "info", counted)

    async def body() -> list[Any]:
        aio = _async(store)
        assert aio.memory is not None
        try:
            # When 50 creates start at once
            return await asyncio.gather(*(aio.create(_key(n), **_terms(n)) for n in range(50)))
        finally:
            await aio.aclose()

    created = asyncio.run(body())

    # Then all were judged and created on one INFO memory reading
    assert [c.status for c in created] == [CreateStatus.CREATED] * 50
    assert readings == ["memory"]
