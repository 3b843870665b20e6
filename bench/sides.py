"""The two sides a call can take from the client: through ``ToolBoundary`` (ours) or as a bare
Celery chain. Both send and wait the same way, so a measurement can run either."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any, Protocol

from celery import Celery

from bench import bare
from bench.tools import NOOP
from bench.tools import registry as noop_registry
from boundary import (
    Limits,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from tasks.app import PROJECTIONS_QUEUE, TOOLS_QUEUE, create_app
from tasks.dispatcher import CeleryDispatcher
from tasks.settings import Settings

#: Calls per run, as an agent run makes them (the shape B5 reprocesses too).
CALLS_PER_RUN = 10
#: Longest wait for one call's outcome, seconds.
CALL_TIMEOUT_S = 120.0
#: The no-op call's arguments.
ARGUMENTS = {"query": "ping"}


def call_ids(prefix: str, count: int) -> Iterator[tuple[str, str]]:
    """``count`` fresh (run_id, tool_call_id) pairs, ``CALLS_PER_RUN`` calls per run."""
    token = secrets.token_hex(4)
    for n in range(count):
        yield f"{prefix}-{token}-{n // CALLS_PER_RUN}", f"call_{n % CALLS_PER_RUN}"


class Side(Protocol):
    name: str
    queues: tuple[str, ...]
    module: str
    app: Celery

    def send(self, run_id: str, tool_call_id: str) -> Any: ...

    def wait(self, handle: Any) -> None: ...

    def invoke(self, run_id: str, tool_call_id: str) -> None: ...


def make_store(settings: Settings, **client_options: Any) -> RedisCanonicalStore:
    # B4 observes a 100-call run: let every READY call become a fact.
    limits = Limits(
        **(settings.limits.model_dump() | {"max_facts": 1000, "max_facts_bytes": 1 << 24})
    )
    return RedisCanonicalStore.from_url(
        settings.store_url, ttl_s=settings.ttl_s, limits=limits, **client_options
    )


class Ours:
    """Calls through ``ToolBoundary.submit`` and ``ToolBoundary.outcome``."""

    name: str = "ours"
    queues: tuple[str, ...] = (TOOLS_QUEUE, PROJECTIONS_QUEUE)
    module: str = "tasks"

    def __init__(self, settings: Settings, store: RedisCanonicalStore | None = None) -> None:
        self.app = create_app(settings, name="bench_ours")
        self.store = store or make_store(settings)
        self.boundary = ToolBoundary(
            store=self.store, registry=noop_registry, dispatcher=CeleryDispatcher(self.app)
        )
        self._runs: dict[str, RunContext] = {}

    def run(self, run_id: str) -> RunContext:
        run = self._runs.get(run_id)
        if run is None:
            run = RunContext(run_id=run_id, authorized_tools=frozenset({NOOP}))
            self._runs = {run_id: run}
        return run

    def send(self, run_id: str, tool_call_id: str) -> tuple[str, str]:
        submission = self.boundary.submit(self.envelope(run_id, tool_call_id), self.run(run_id))
        if not submission.accepted:
            raise RuntimeError(f"call refused: {submission.outcome}")
        return run_id, tool_call_id

    def wait(self, handle: tuple[str, str]) -> None:
        _check(self.boundary.outcome(*handle, timeout=CALL_TIMEOUT_S))

    def envelope(self, run_id: str, tool_call_id: str) -> ToolCallEnvelope:
        return ToolCallEnvelope(
            run_id=run_id, tool_call_id=tool_call_id, tool_name=NOOP, arguments=ARGUMENTS
        )

    def invoke(self, run_id: str, tool_call_id: str) -> None:
        """``ToolBoundary.invoke``: what an agent loop calls for one tool call."""
        envelope = self.envelope(run_id, tool_call_id)
        _check(self.boundary.invoke(envelope, self.run(run_id), timeout=CALL_TIMEOUT_S))


def _check(outcome: ToolOutcome) -> None:
    if outcome.status != "READY":
        raise RuntimeError(f"call failed: {outcome.error_code}")


class Bare:
    """Sends the same chain with no boundary and waits on its last AsyncResult."""

    name: str = "bare"
    queues: tuple[str, ...] = bare.QUEUES
    module: str = "bench.bare"

    def __init__(self, settings: Settings) -> None:
        self.app = bare.create_bare_app(settings)

    def send(self, run_id: str, tool_call_id: str) -> Any:
        return bare.send_chain(self.app, run_id, tool_call_id)

    def wait(self, handle: Any) -> None:
        value = handle.get(timeout=CALL_TIMEOUT_S, disable_sync_subtasks=False)
        if not isinstance(value, dict):
            raise RuntimeError("bare chain failed")

    def invoke(self, run_id: str, tool_call_id: str) -> None:
        self.wait(self.send(run_id, tool_call_id))
