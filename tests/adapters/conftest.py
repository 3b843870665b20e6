"""Fixtures of the adapter tests: a run handle over the real Celery worker thread (Redis broker
and backend), a fresh run per test, and what a test needs to read what a call left behind."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from boundary import CanonicalKey, CanonicalRecord, RunBoundary, RunContext, ToolBoundary
from tasks.runtime import get_runtime
from tests.support import celery_tools

RECORDED = Path(__file__).parent / "recorded"
#: The tools an adapter test's run may call.
TOOLS = frozenset({"find", "boom", "gate", "lookup", "sleepy", "together"})


def recorded(name: str) -> Any:
    """A provider's recorded JSON response."""
    return json.loads((RECORDED / name).read_text(encoding="utf-8"))


@pytest.fixture
def handle(celery_boundary: ToolBoundary) -> RunBoundary:
    """A run of its own (so no earlier test's task result can be read as this one's)."""
    run = RunContext(run_id=f"adapters-{uuid.uuid4().hex[:12]}", authorized_tools=TOOLS)
    return celery_boundary.for_run(run, timeout=30)


@pytest.fixture
def record(handle: RunBoundary) -> Callable[[str], CanonicalRecord | None]:
    """Reads a call's canonical record (Harness view) by its tool_call_id."""

    def read(tool_call_id: str) -> CanonicalRecord | None:
        key = CanonicalKey(run_id=handle.run_id, tool_call_id=tool_call_id)
        return get_runtime().store.get(key)

    return read


class Gate:
    """The ``gate`` tool's gate. ``opener()`` is a coroutine that opens it once the tool is
    waiting: if the code under test blocks the event loop while the tool runs, the opener
    never runs in time and the tool reports the gate "shut"."""

    async def opener(self) -> None:
        while not celery_tools.GATE_REACHED.is_set():
            await asyncio.sleep(0.01)
        celery_tools.GATE.set()


@pytest.fixture
def gate() -> Iterator[Gate]:
    """The ``gate`` tool's events, cleared before and after the test."""
    for event in (celery_tools.GATE, celery_tools.GATE_REACHED):
        event.clear()
    yield Gate()
    for event in (celery_tools.GATE, celery_tools.GATE_REACHED):
        event.clear()


class ScriptedHTTP:
    """A provider over a mock HTTP transport: answers each request with the next recorded
    response and keeps every request body, which is what the model was shown."""

    def __init__(self, *responses: Any) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        import httpx2

        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.responses.pop(0))

    def sdk(self, sdk_class: Any, base_url: str) -> Any:
        """A provider SDK's client (``openai.OpenAI``, ``anthropic.AsyncAnthropic``...) talking
        to this transport: a test key, no retries, an async HTTP client for an async SDK."""
        import httpx2

        http = httpx2.AsyncClient if sdk_class.__name__.startswith("Async") else httpx2.Client
        return sdk_class(
            api_key="sk-test",
            base_url=base_url,
            http_client=http(transport=httpx2.MockTransport(self)),
            max_retries=0,
        )
