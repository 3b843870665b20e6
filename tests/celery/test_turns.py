"""A model turn's calls in one round trip (``submit_many`` / ``invoke_many`` and their async
and ``RunBoundary`` forms) against real Redis and a real worker: each call keeps its own
outcome, in the order given, exactly as the same calls made one by one; one create script
and one broker write for the whole turn."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.connection

from boundary import RunContext, ToolBoundary, ToolCallEnvelope
from boundary.errors import ErrorCode
from boundary.flow import Flow
from boundary.models import InvocationStatus, Submission, ToolOutcome
from boundary.store import keys
from boundary.store._redis_common import load_script
from boundary.store.turns import CREATE_MANY
from tests.conftest import BROKER_DB, CELERY_MAX_RAW_BYTES, STORE_DB
from tests.support import flow_tools
from tests.support.helpers import wait_until

#: Longest wait for a turn's outcomes, seconds (a bound, not a timing assertion).
WAIT_S = 30.0
TOOLS = frozenset({"lookup", "narrow", "huge_raw", "sleepy"})


@pytest.fixture
def held() -> Iterator[None]:
    """``narrow`` calls with ``hold`` run until the test lets them go."""
    flow_tools.HOLD.clear()
    yield
    flow_tools.HOLD.set()


def _run(max_lookups: int = 3) -> RunContext:
    return RunContext(
        run_id=f"run-turn-{uuid.uuid4().hex[:8]}",
        authorized_tools=TOOLS,
        max_calls_per_tool={"lookup": max_lookups},
    )


def _mixed_turn(run: RunContext, request_limit: int) -> list[ToolCallEnvelope]:
    tag = uuid.uuid4().hex[:8]

    def env(call_id: str, tool: str, arguments: dict[str, Any]) -> ToolCallEnvelope:
        return ToolCallEnvelope(
            run_id=run.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
        )

    return [
        env("t-a", "lookup", {"query": "a"}),  # accepted
        env("t-a", "lookup", {"query": "a"}),  # the same call again: a duplicate
        env("t-boom", "boom", {}),  # not authorized for the run
        env("t-n1", "narrow", {"tag": tag, "hold": True}),  # takes the one slot
        env("t-n2", "narrow", {"tag": tag}),  # waits in line
        env("t-n3", "narrow", {"tag": tag}),  # waits in line (max_waiting 2)
        env("t-n4", "narrow", {"tag": tag}),  # the line is full: TOOL_BUSY
        env("t-huge", "huge_raw", {"bytes": CELERY_MAX_RAW_BYTES + 1}),  # result too large
        env("t-b", "lookup", {"query": "b"}),  # the tool budget's 2nd
        env("t-c", "lookup", {"query": "c"}),  # its 3rd, the last
        env("t-d", "lookup", {"query": "d"}),  # the budget ran out part way
        env("t-big", "lookup", {"query": "x" * request_limit}),  # request over its limit
    ]


def _codes(submissions: list[Submission]) -> list[str | None]:
    return [
        None
        if s.accepted
        else (s.outcome.error_code.value if s.outcome and s.outcome.error_code else "?")
        for s in submissions
    ]


def _summary(outcome: ToolOutcome) -> tuple[str | None, str, str | None]:
    code = outcome.error_code.value if outcome.error_code else None
    return outcome.tool_call_id, outcome.status.value, code


def _ends(
    boundary: ToolBoundary, run: RunContext, turn: list[ToolCallEnvelope]
) -> list[tuple[str | None, str, str | None]]:
    """The outcomes of the turn's accepted calls (``WANTED_CODES``: no code)."""
    return [
        _summary(boundary.outcome(run.run_id, e.tool_call_id or "", timeout=WAIT_S))
        for e, code in zip(turn, WANTED_CODES, strict=True)
        if code is None
    ]


def _until_narrow_is_free(boundary: ToolBoundary) -> None:
    """Waits until no call holds or waits for the ``narrow`` tool's slot: a seal gives its
    slot up in a round trip of its own, after the seal its waiter sees."""
    flow = boundary.store.flow
    assert isinstance(flow, Flow)

    def free() -> bool:
        status = flow.status("narrow")
        return not (status.running or status.waiting)

    wait_until(free, "the narrow tool's slot to be free", WAIT_S)


def _rebased(envelopes: list[ToolCallEnvelope], run: RunContext) -> list[ToolCallEnvelope]:
    return [e.model_copy(update={"run_id": run.run_id}) for e in envelopes]


WANTED_CODES = [
    None,
    "DUPLICATE_TOOL_CALL",
    "UNAUTHORIZED",
    None,
    None,
    None,
    "TOOL_BUSY",
    None,
    None,
    None,
    "TOOL_BUDGET_EXHAUSTED",
    "REQUEST_TOO_LARGE",
]


def test_a_mixed_turn_keeps_each_calls_outcome_in_order_as_one_by_one(
    celery_boundary: ToolBoundary, held: None
) -> None:
    boundary = celery_boundary
    limit = boundary.store.limits.max_request_bytes
    _until_narrow_is_free(boundary)  # (no earlier test's call holds the limited tool's slot)
    # Given a turn mixing every case, made once as a turn and once one by one (other runs)
    turn_run, single_run = _run(), _run()
    turn = _mixed_turn(turn_run, limit)
    singles = _rebased(_mixed_turn(single_run, limit), single_run)

    # When the turn is submitted at once and runs to its end; then the same calls one after
    # the other (the limited tool's one slot is the fleet's: the two never share it)
    together = boundary.submit_many(turn, turn_run)
    flow_tools.HOLD.set()
    ends = _ends(boundary, turn_run, turn)
    _until_narrow_is_free(boundary)
    flow_tools.HOLD.clear()
    one_by_one = [boundary.submit(envelope, single_run) for envelope in singles]
    flow_tools.HOLD.set()
    single_ends = _ends(boundary, single_run, singles)

    # Then each call of the turn has its own answer, in the order given: the refused ones
    # refuse no other, and every answer is the one the call got one by one
    assert _codes(together) == WANTED_CODES
    assert _codes(one_by_one) == WANTED_CODES
    assert [s.key.tool_call_id if s.key else None for s in together] == [
        None if code in ("UNAUTHORIZED", "REQUEST_TOO_LARGE") else e.tool_call_id
        for e, code in zip(turn, WANTED_CODES, strict=True)
    ]
    # And the accepted calls end as one by one: READY, the too large result ERROR, and the
    # calls that waited in line for the limited tool's slot ran once it was free
    assert (
        ends
        == single_ends
        == [
            ("t-a", "READY", None),
            ("t-n1", "READY", None),
            ("t-n2", "READY", None),
            ("t-n3", "READY", None),
            ("t-huge", "ERROR", "RESULT_TOO_LARGE"),
            ("t-b", "READY", None),
            ("t-c", "READY", None),
        ]
    )
    # And the budget was charged once per created call, in order
    budget = boundary.store.client.hgetall(keys.budget_key(turn_run.run_id))  # type: ignore[attr-defined]
    assert budget["tool:lookup"] == "3" and budget["calls"] == "7"


def test_invoke_many_waits_for_all_and_answers_in_order(celery_boundary: ToolBoundary) -> None:
    run = _run(max_lookups=10)
    # Given a turn whose calls end in another order than given (the first is the slowest)
    turn = [
        ToolCallEnvelope(
            run_id=run.run_id, tool_call_id="slow", tool_name="sleepy", arguments={"seconds": 0.5}
        ),
        *(
            ToolCallEnvelope(
                run_id=run.run_id,
                tool_call_id=f"q{i}",
                tool_name="lookup",
                arguments={"query": f"{i}"},
            )
            for i in range(5)
        ),
        ToolCallEnvelope(
            run_id=run.run_id, tool_call_id="q0", tool_name="lookup", arguments={"query": "other"}
        ),
    ]
    # When it is invoked as one turn, through the run's handle
    outcomes = celery_boundary.for_run(run, timeout=WAIT_S).call_many(
        [(e.tool_call_id, e.tool_name, e.arguments) for e in turn]
    )
    # Then every outcome is there, sealed, in the order given
    assert [_summary(o) for o in outcomes] == [
        ("slow", "READY", None),
        *((f"q{i}", "READY", None) for i in range(5)),
        ("q0", "ERROR", "DUPLICATE_TOOL_CALL_CONFLICT"),
    ]
    assert outcomes[1].result == {"count": 3, "first": "doc-0"}


def test_the_async_forms_answer_as_the_sync_ones(celery_boundary: ToolBoundary) -> None:
    run = _run(max_lookups=2)
    turn = [
        ToolCallEnvelope(
            run_id=run.run_id, tool_call_id=f"a{i}", tool_name="lookup", arguments={"query": f"{i}"}
        )
        for i in range(3)
    ]

    async def main() -> tuple[list[Submission], list[ToolOutcome]]:
        try:
            submitted = await celery_boundary.asubmit_many(turn[:1], run)
            outcomes = await celery_boundary.ainvoke_many(turn[1:], run, timeout=WAIT_S)
            handle = await celery_boundary.for_run(run).acall_many(
                [("a0", "lookup", {"query": "0"})]
            )
            return submitted, [*outcomes, *handle]
        finally:
            await celery_boundary.aclose()

    submitted, outcomes = asyncio.run(main())
    assert submitted[0].accepted
    # (the budget of two: the turn's second call is refused, the first duplicate is a duplicate)
    assert [_summary(o) for o in outcomes] == [
        ("a1", "READY", None),
        ("a2", "ERROR", "TOOL_BUDGET_EXHAUSTED"),
        ("a0", "ERROR", "DUPLICATE_TOOL_CALL"),
    ]


def _packed(command: Any) -> bytes:
    """A packet's bytes (redis-py sends a list of chunks, or one buffer)."""
    if isinstance(command, (list, tuple)):
        return b"".join(bytes(chunk) for chunk in command)
    return bytes(command)


class _Writes:
    """Counts the writes (command packets) carrying messages (``LPUSH``) that redis-py's
    connections send to one DB from the thread that made it, through the real method: each
    is one round trip's request. A producer new to this thread's pick of the publisher's pool
    first declares its queues (``MULTI``/``LLEN``, ``SADD`` of the bindings): set-up of that
    connection, not a publish, so not counted (which producer a send gets depends on what the
    in-process worker's own sends hold at that moment)."""

    def __init__(self, db: int) -> None:
        self.db = db
        self.count = 0
        self._original = redis.connection.AbstractConnection.send_packed_command
        self._lock = threading.Lock()
        self.thread = threading.get_ident()

    def __enter__(self) -> _Writes:
        original, counter = self._original, self

        def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            # This thread's only: the in-process worker and the task-sent events write on
            # threads of their own.
            if (
                getattr(conn, "db", None) == counter.db
                and threading.get_ident() == counter.thread
                and b"LPUSH" in _packed(command)
            ):
                with counter._lock:
                    counter.count += 1
            original(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        redis.connection.AbstractConnection.send_packed_command = self._original  # type: ignore[method-assign]


def test_a_turn_is_one_create_script_and_one_broker_write(
    celery_boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    boundary = celery_boundary
    run = _run(max_lookups=8)
    turn = [
        ToolCallEnvelope(
            run_id=run.run_id, tool_call_id=f"m{i}", tool_name="lookup", arguments={"query": f"{i}"}
        )
        for i in range(8)
    ]
    # (warm: the broker's queue declared, the scripts loaded, the connections open)
    warm = _run()
    boundary.invoke_many(
        [e.model_copy(update={"run_id": warm.run_id}) for e in turn[:2]], warm, timeout=WAIT_S
    )
    # Given Redis's own log of every command it runs
    seen: list[dict[str, Any]] = []
    stop = threading.Event()
    where = redis_client.connection_pool.connection_kwargs
    monitor_client = redis.Redis(host=where["host"], port=where["port"])

    def watch() -> None:
        with monitor_client.monitor() as monitor:
            for command in monitor.listen():
                seen.append(command)
                if stop.is_set() and "STOP-TURN-MONITOR" in command["command"]:
                    return

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()

    # MONITOR is on once it shows a command sent after it
    def monitoring() -> bool:
        if any("START-TURN-MONITOR" in c["command"] for c in list(seen)):
            return True
        monitor_client.echo("START-TURN-MONITOR")
        return False

    wait_until(monitoring, "MONITOR to start", WAIT_S, every=0.05)
    # When a turn of eight calls is submitted, counting the broker connection's writes
    with _Writes(BROKER_DB) as broker_writes:
        submissions = boundary.submit_many(turn, run)
    stop.set()
    monitor_client.echo("STOP-TURN-MONITOR")
    reader.join(10)
    assert all(s.accepted for s in submissions)
    # Then the store ran ONE script for the eight creates (create_many.lua), no create.lua
    many_sha = hashlib.sha1(CREATE_MANY.encode()).hexdigest()
    store_cmds = [
        c["command"] for c in seen if c.get("db") == STORE_DB and c.get("client_type") != "lua"
    ]
    one_sha = hashlib.sha1(load_script("create").encode()).hexdigest()
    # (the worker's own scripts, claim and the like, run meanwhile: only creates count)
    creates = [c.split()[1] for c in store_cmds if c.startswith("EVALSHA") and
               c.split()[1] in (many_sha, one_sha)]  # fmt: skip
    assert creates == [many_sha], store_cmds
    # And the eight execute messages reached the broker's tools queue in ONE write of the
    # publishing connection (a pipeline of eight LPUSHes: one round trip)
    pushes = [
        c["command"] for c in seen
        if c.get("db") == BROKER_DB and c["command"].startswith("LPUSH tools ")
    ]  # fmt: skip
    assert len(pushes) == 8
    assert broker_writes.count == 1
    # (where calls made one by one write once each)
    solo = _run()
    with _Writes(BROKER_DB) as single_writes:
        for envelope in _rebased(turn[:2], solo):
            assert boundary.submit(envelope, solo).accepted
    assert single_writes.count == 2
    # And every call ends READY
    outcomes = [boundary.outcome(run.run_id, f"m{i}", timeout=WAIT_S) for i in range(8)]
    assert all(o.status is InvocationStatus.READY for o in outcomes)


def test_a_failed_turn_publish_seals_every_call_dispatch_failed(
    celery_boundary: ToolBoundary,
) -> None:
    boundary = celery_boundary
    run = _run()

    class Refusing:
        """A dispatcher whose batch send fails (a broker that does not answer)."""

        waits_on_seal = False

        def dispatch(self, key: Any) -> None:
            raise RuntimeError("redis://secret@10.0.0.1 down")

        def wait(self, key: Any, timeout: float | None) -> None:
            return None

        def dispatch_many(self, calls: Any) -> None:
            raise RuntimeError("redis://secret@10.0.0.1 down")

    broken = ToolBoundary(store=boundary.store, registry=boundary.registry, dispatcher=Refusing())
    turn = [
        ToolCallEnvelope(
            run_id=run.run_id, tool_call_id=f"f{i}", tool_name="lookup", arguments={"query": "q"}
        )
        for i in range(2)
    ]
    submissions = broken.submit_many(turn, run)
    assert [s.outcome.error_code if s.outcome else None for s in submissions] == [
        ErrorCode.DISPATCH_FAILED
    ] * 2
    for i in range(2):
        record = boundary.store.get(submissions[i].key)  # type: ignore[arg-type]
        assert record is not None and record.error_code is ErrorCode.DISPATCH_FAILED
