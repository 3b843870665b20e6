"""The two sides a call can take from the client: through ``ToolBoundary`` (ours) or as a bare
Celery chain. Both send and wait the same way, so a measurement can run either."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any, Protocol

from celery import Celery

from bench.peers import bare, defaults
from bench.peers.tools import NOOP
from bench.peers.tools import registry as noop_registry
from bench.suite.config import INLINE_QUEUES
from boundary import (
    CanonicalKey,
    Limits,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.core import DEFAULT_POLL_S
from tasks.settings import Settings
from tasks.wiring.app import PROJECTIONS_QUEUE, TOOLS_QUEUE, create_app
from tasks.wiring.dispatcher import CeleryDispatcher

#: Calls per run, as an agent run makes them (the shape B5 reprocesses too).
CALLS_PER_RUN = 10
#: Longest wait for one call's outcome, seconds.
CALL_TIMEOUT_S = 120.0
#: Longest single wait on a peer's result before it is asked again: ``ToolBoundary``'s.
POLL_S = DEFAULT_POLL_S
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
    queues: tuple[str, str] = (TOOLS_QUEUE, PROJECTIONS_QUEUE)
    module: str = "tasks"

    def __init__(self, settings: Settings, store: RedisCanonicalStore | None = None) -> None:
        self.app = create_app(settings, name=f"bench_{self.name}")
        self.store = store or make_store(settings)
        dispatcher = CeleryDispatcher(self.app, queues=self.queues)
        self.boundary = ToolBoundary(
            store=self.store, registry=noop_registry, dispatcher=dispatcher
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


def wait_sliced(dispatcher: CeleryDispatcher, key: CanonicalKey) -> Any:
    """Waits on one call's project task exactly as ``ToolBoundary.outcome`` waits on ours:
    ``CeleryDispatcher.wait`` (its ``result``) on the project task alone, in slices of
    ``POLL_S`` (a missed wake-up costs one slice, never a hang). A chain's last
    ``AsyncResult.get()`` would also read every parent's result key (8 GETs a call against
    our 3): a handicap that flattered us, so the peers do not wait that way. Only the record
    reads between slices are ours alone: a peer has no record."""
    give_up = time.monotonic() + CALL_TIMEOUT_S
    while True:
        value = dispatcher.result(key, POLL_S)
        if value is not None:
            return value
        if time.monotonic() > give_up:
            raise TimeoutError(f"no result for {key.identity}")


class Inline(Ours):
    """Ours, with a worker that runs the tool and projector on the task's own thread
    (``bench.peers.inline``): ours over this side is what the time limits' thread hand-offs cost."""

    name: str = "inline"
    queues: tuple[str, str] = INLINE_QUEUES
    module: str = "bench.peers.inline"


class Bare:
    """The fair peer: the same chain with no boundary, on our Celery settings, waiting on the
    project task as ours does."""

    name: str = "bare"
    queues: tuple[str, ...] = bare.QUEUES
    module: str = "bench.peers.bare"

    def __init__(self, settings: Settings) -> None:
        self.app = bare.create_bare_app(settings)
        # Only its wait is used: the peers send through the canvas, as a Celery user does.
        self.waiter = CeleryDispatcher(self.app)

    def send(self, run_id: str, tool_call_id: str) -> CanonicalKey:
        bare.send_chain(self.app, run_id, tool_call_id)
        return CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)

    def wait(self, handle: CanonicalKey) -> None:
        if not isinstance(wait_sliced(self.waiter, handle), dict):
            raise RuntimeError(f"{self.name} chain failed")

    def invoke(self, run_id: str, tool_call_id: str) -> None:
        self.wait(self.send(run_id, tool_call_id))


class BareSpaced(Bare):
    """The fair peer with our worker's event spacing (``bench.peers.bare_spaced``): the same
    chain, app and wait, its worker sending task events as ours does. Ours over it is the
    boundary's own cost (like for like); ours over ``Bare`` is the shipping default against
    stock Celery."""

    name: str = "bare_spaced"
    queues: tuple[str, ...] = bare.SPACED_QUEUES
    module: str = "bench.peers.bare_spaced"

    def send(self, run_id: str, tool_call_id: str) -> CanonicalKey:
        bare.send_chain(self.app, run_id, tool_call_id, queues=bare.SPACED_QUEUES)
        return CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)


class BareOne(Bare):
    """The fair peer of a call projected in line (our default): the same call as one task
    (``bench.peers.bare.execute_one``) on our Celery settings, waited on as ours is."""

    name: str = "bare_one"
    queues: tuple[str, ...] = (bare.ONE_QUEUE,)

    def send(self, run_id: str, tool_call_id: str) -> CanonicalKey:
        bare.send_one(self.app, run_id, tool_call_id)
        return CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)


class Defaults(Bare):
    """The same chain on Celery's default settings (``bench.peers.defaults``)."""

    name: str = "defaults"
    queues: tuple[str, ...] = defaults.QUEUES
    module: str = "bench.peers.defaults"

    def __init__(self, settings: Settings) -> None:
        self.app = defaults.create_defaults_app(settings)
        self.waiter = CeleryDispatcher(self.app)

    def send(self, run_id: str, tool_call_id: str) -> CanonicalKey:
        names = (defaults.EXECUTE, defaults.PROJECT)
        bare.send_chain(self.app, run_id, tool_call_id, names, defaults.QUEUES)
        return CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)
