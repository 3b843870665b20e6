"""A limited tool's MCP task says why it has not started: its ``statusMessage`` is "waiting for
a slot (N ahead)" while it waits in its tool's line (``docs/how-to/flow-control.md``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as types
import pytest
import redis
from mcp import Client

from boundary import InProcessDispatcher, RedisCanonicalStore, RunContext, ToolBoundary
from tasks.mcp_server.server import build_server
from tests.mcp.test_tasks_2025 import create_task, get, task_call
from tests.support import celery_tools
from tests.support.celery_tools import registry

RUN = RunContext(run_id="run-tasks25", authorized_tools=frozenset({"held_slot"}))


@pytest.fixture
def boundary(redis_client: redis.Redis) -> Iterator[ToolBoundary]:
    celery_tools.HELD.clear()
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    built = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    assert built.open_run(RUN).is_open
    yield built
    celery_tools.HELD.set()


def test_a_waiting_task_says_it_waits_for_a_slot(boundary: ToolBoundary) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with Client(build_server(boundary), mode="legacy") as client:
            session = client.session
            await create_task(session, task_call("held_slot", {}, "call-w1"))
            second = await create_task(session, task_call("held_slot", {}, "call-w2"))
            waiting = await session.send_request(get(second.task.task_id), types.GetTaskResult)
            celery_tools.HELD.set()
            outcome = await anyio.to_thread.run_sync(
                lambda: boundary.outcome(RUN.run_id, "call-w2", timeout=30)
            )
            done = await session.send_request(get(second.task.task_id), types.GetTaskResult)
            return (waiting, outcome), done

    (waiting, outcome), done = anyio.run(scenario)
    assert waiting.status == "working"
    assert waiting.status_message == "waiting for a slot (0 ahead)"
    assert outcome.status == "READY"
    assert done.status == "completed"
