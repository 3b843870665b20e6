"""Fake tools and projectors, and small Redis probes, shared by the boundary's tests.

The fakes count their calls with a lock so race tests can prove "executed exactly once".
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import redis

from bench.suite.fixtures import NOOP_CALL
from boundary import (
    CanonicalKey,
    EvidenceStatus,
    InProcessDispatcher,
    Limits,
    Projection,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
)
from boundary.store import keys

#: Strings that must never reach an agent, a Submission or a log line.
SECRET_TOKEN = "sk-live-SECRET123"
SECRET_URL = "redis://:hunter2@10.0.0.5:6379/0"
STACK_TRACE = "Traceback (most recent call last):"
LEAKS = (SECRET_TOKEN, SECRET_URL, "hunter2", STACK_TRACE, "tb:{")
#: A message holding every kind of leak at once.
LEAKY_MESSAGE = f'{STACK_TRACE}\n  File "x.py", line 1\nusing {SECRET_TOKEN} at {SECRET_URL}'

RUN_ID = "run-1"
TOOL = "search"


class Counter:
    """A thread-safe call counter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def increment(self) -> None:
        with self._lock:
            self.value += 1


class FakeTool:
    """An executor that records its arguments and returns ``raw`` (or raises ``error``).

    ``during`` runs inside the executor, e.g. to read the store while the tool runs.
    """

    def __init__(
        self,
        raw: Any = None,
        *,
        error: BaseException | None = None,
        during: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.raw = {"hits": [{"id": 1, "text": "timeout in api"}]} if raw is None else raw
        self.error = error
        self.during = during
        self.calls = Counter()
        self.arguments: list[dict[str, Any]] = []

    def __call__(self, arguments: dict[str, Any]) -> Any:
        self.calls.increment()
        self.arguments.append(arguments)
        if self.during is not None:
            self.during(arguments)
        if self.error is not None:
            raise self.error
        return self.raw


class FakeProjector:
    """A projector returning a fixed value (a ``Projection`` or a mapping), or raising."""

    def __init__(
        self,
        value: Projection | Mapping[str, Any] | Any = None,
        *,
        error: BaseException | None = None,
    ) -> None:
        self.value = (
            Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"count": 1})
            if value is None
            else value
        )
        self.error = error
        self.calls = Counter()
        self.seen: list[tuple[Any, dict[str, Any]]] = []

    def project(self, raw: Any, request: dict[str, Any]) -> Any:
        self.calls.increment()
        self.seen.append((raw, request))
        if self.error is not None:
            raise self.error
        return self.value


class EchoProjector:
    """A projector whose result is the raw response itself, evidence found."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result=raw)


def no_evidence(scope: Any) -> Projection:
    return Projection(evidence_status=EvidenceStatus.NO_EVIDENCE, result={"hits": []}, scope=scope)


def register(
    registry: ToolRegistry,
    tool: FakeTool | None = None,
    projector: FakeProjector | None = None,
    *,
    name: str = TOOL,
    read_only: bool = True,
) -> tuple[FakeTool, FakeProjector]:
    """Registers a fake tool and returns its executor and projector for inspection."""
    tool = tool or FakeTool()
    projector = projector or FakeProjector()
    registry.register(ToolSpec(name=name, executor=tool, projector=projector, read_only=read_only))
    return tool, projector


def make_run(
    run_id: str = RUN_ID,
    tools: tuple[str, ...] = (TOOL,),
    **fields: Any,
) -> RunContext:
    return RunContext(run_id=run_id, authorized_tools=frozenset(tools), **fields)


def envelope(
    tool_call_id: str | None = "call_1",
    arguments: Any = '{"query": "timeout"}',
    *,
    run_id: str | None = RUN_ID,
    tool_name: str | None = TOOL,
) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=run_id, tool_call_id=tool_call_id, tool_name=tool_name, arguments=arguments
    )


def key_of(tool_call_id: str, run_id: str = RUN_ID) -> CanonicalKey:
    return CanonicalKey(run_id=run_id, tool_call_id=tool_call_id)


def make_boundary(
    redis_client: redis.Redis,
    registry: ToolRegistry,
    *,
    limits: Limits | None = None,
    ttl_s: float = 600,
) -> tuple[ToolBoundary, RedisCanonicalStore]:
    """A boundary with its own limits or TTL, on the test DB, running calls in-process."""
    store = RedisCanonicalStore(client=redis_client, ttl_s=ttl_s, limits=limits)
    dispatcher = InProcessDispatcher(store, registry, inline=True)
    return ToolBoundary(store=store, registry=registry, dispatcher=dispatcher), store


def create_terms(**overrides: Any) -> dict[str, Any]:
    """``store.create``'s keyword arguments: a call of ``TOOL`` with empty arguments, no
    deadline, no budget, reapable an hour on (the benchmark's ``NOOP_CALL`` but for the
    tool), ``overrides`` replacing any of them."""
    return {**NOOP_CALL, "tool_name": TOOL, **overrides}


def create_projecting(
    store: RedisCanonicalStore,
    tool_call_id: str = "call_1",
    *,
    run_id: str = RUN_ID,
    tool_name: str = TOOL,
    request: str = '{"query":"timeout"}',
) -> CanonicalKey:
    """A PROJECTING record written straight through the store (no tool, no dispatcher)."""
    key = key_of(tool_call_id, run_id)
    created = store.create(key, **create_terms(tool_name=tool_name, request=request))
    assert created.seq is not None
    return key


def db_keys(redis_client: redis.Redis) -> set[str]:
    """Every key of the test DB (SCAN, so it is safe on a busy server)."""
    return set(redis_client.scan_iter(match="*", count=1000))


def record_keys(redis_client: redis.Redis) -> set[str]:
    return set(redis_client.scan_iter(match=f"{keys.PREFIX}:{{*}}:call:*", count=1000))


def binary_client(redis_client: redis.Redis) -> redis.Redis:
    """A client on the same DB that returns bytes (for DUMP, byte-for-byte comparisons)."""
    options = redis_client.connection_pool.connection_kwargs
    return redis.Redis(
        host=options.get("host", "localhost"),
        port=options.get("port", 6379),
        db=options.get("db", 0),
        username=options.get("username"),
        password=options.get("password"),
        decode_responses=False,
    )


def snapshot(redis_client: redis.Redis, key: str) -> tuple[dict[bytes, bytes], bytes | None]:
    """A key's fields and its DUMP serialization, byte for byte."""
    client = binary_client(redis_client)
    try:
        return client.hgetall(key), client.dump(key)  # type: ignore[return-value]
    finally:
        client.close()


def load_scripts(owner: object) -> None:
    """Sends the server every Lua script ``owner`` (a store) holds, so that a count of its
    commands sees no ``NOSCRIPT`` reload: another test on the same server may have flushed
    the server's scripts (``SCRIPT FLUSH``) before this one."""
    for value in vars(owner).values():
        if isinstance(value, redis.commands.core.Script):
            value.registered_client.script_load(value.script)


@contextmanager
def monitored(
    redis_client: redis.Redis, timeout_s: float = 10.0, *, round_trips: bool = False
) -> Iterator[list[str]]:
    """Collects every command the server runs on the test DB (Lua calls included, unless
    ``round_trips``: then only the commands clients sent), lower-cased.

    MONITOR sees exactly what was run, on our DB only: unlike INFO commandstats, other
    processes using other DBs of the same server cannot disturb it. The list is complete when
    the ``with`` block ends: a unique ECHO marks the end of the stream.
    """
    db = int(redis_client.connection_pool.connection_kwargs.get("db", 0))
    marker = f"tb-test-monitor-end-{uuid.uuid4().hex}"
    commands: list[str] = []
    monitor = redis_client.monitor()
    monitor.__enter__()  # MONITOR is confirmed before the block runs

    def collect() -> None:
        while True:
            entry = monitor.next_command()
            if entry is None:
                continue
            if entry["db"] != db:
                continue
            if round_trips and entry.get("client_type") == "lua":
                continue
            if entry["command"].lower() == f"echo {marker}":
                return
            commands.append(entry["command"].lower())

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    try:
        yield commands
    finally:
        redis_client.echo(marker)
        reader.join(timeout_s)
        monitor.__exit__(None, None, None)
    assert not reader.is_alive(), "MONITOR never saw the end marker"


#: Commands that set, refresh or remove an expiry.
EXPIRY_COMMANDS = frozenset(
    {"expire", "pexpire", "expireat", "pexpireat", "persist", "getex", "restore"}
)


def expiry_commands(commands: list[str]) -> list[str]:
    return [c for c in commands if c.split(" ", 1)[0] in EXPIRY_COMMANDS]


def is_running(outcome: ToolOutcome, tool_call_id: str) -> bool:
    """The outcome of a call still running, whatever progress its tool reported (a started
    call's outcome carries a ``CallProgress`` of attempt 1)."""
    progress = outcome.progress
    if progress is not None and (progress.attempt != 1 or progress.started_at is None):
        return False
    return outcome.model_copy(update={"progress": None}) == ToolOutcome.running(tool_call_id)


def wait_until(
    condition: Callable[[], Any], what: str, patience: float = 30.0, *, every: float = 0.02
) -> Any:
    """``condition()``'s first truthy value, asked every ``every`` seconds; fails the test
    after ``patience`` seconds (a bound on a wait, never a claim about how fast). The suite's
    one polling wait: use it rather than a loop of your own."""
    give_up = time.monotonic() + patience
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < give_up, f"gave up waiting for {what}"
        time.sleep(every)
