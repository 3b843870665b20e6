"""``boundary.for_run(run)``: calls without envelopes or repeated run ids, on real Redis, and
``input_schema`` refusals through the whole boundary."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    InvocationStatus,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
)
from tests.support.helpers import (
    TOOL,
    FakeProjector,
    FakeTool,
    db_keys,
    key_of,
    make_boundary,
    make_run,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "maximum": 5}},
    "required": ["query"],
    "additionalProperties": False,
}
NEEDLE = "needle-7f3"


def declare(registry: ToolRegistry, tool: FakeTool, *, name: str = TOOL, **fields: Any) -> None:
    registry.register(
        ToolSpec(
            name=name,
            executor=tool,
            projector=FakeProjector(),
            read_only=fields.pop("read_only", True),
            description=f"The {name} tool.",
            input_schema=SCHEMA,
            **fields,
        )
    )


def test_a_call_through_the_handle_keeps_the_exact_id(redis_client: redis.Redis) -> None:
    # Given a run handle
    registry = ToolRegistry()
    tool = FakeTool()
    declare(registry, tool)
    boundary, store = make_boundary(redis_client, registry)
    handle = boundary.for_run(make_run())
    # When the framework's id, the tool's name and the arguments' JSON text are handed over
    outcome = handle.call("toolu_01A-b.c", TOOL, '{"query": "timeout"}')
    # Then the call ran once under exactly that id
    assert outcome.status is InvocationStatus.READY
    assert outcome.tool_call_id == "toolu_01A-b.c"
    record = store.get(key_of("toolu_01A-b.c"))
    assert record is not None and record.tool_call_id == "toolu_01A-b.c"
    assert tool.arguments == [{"query": "timeout"}]
    assert handle.run_id == "run-1"
    assert handle.observe().facts[0].tool_call_id == "toolu_01A-b.c"
    assert handle.outcome("toolu_01A-b.c") == outcome


def test_a_repeated_id_is_refused_and_not_run(redis_client: redis.Redis) -> None:
    registry = ToolRegistry()
    tool = FakeTool()
    declare(registry, tool)
    boundary, _ = make_boundary(redis_client, registry)
    handle = boundary.for_run(make_run())
    handle.call("call_1", TOOL, {"query": "a"})

    again = handle.call("call_1", TOOL, {"query": "b"})

    assert again == ToolOutcome.error("call_1", ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT)
    assert tool.calls.value == 1


def test_arguments_failing_the_schema_name_the_path_only(redis_client: redis.Redis) -> None:
    # Given a tool with an input schema
    registry = ToolRegistry()
    tool = FakeTool()
    declare(registry, tool)
    boundary, _ = make_boundary(redis_client, registry)
    before = db_keys(redis_client)
    # When the model sends a value over the schema's maximum
    outcome = boundary.for_run(make_run()).call("call_1", TOOL, {"query": NEEDLE, "limit": 9})
    # Then INVALID_ARGUMENTS names the schema keyword, nothing is stored and nothing ran
    assert outcome == ToolOutcome.error(
        "call_1", ErrorCode.INVALID_ARGUMENTS, path="/properties/limit/maximum"
    )
    assert outcome.evidence_status is EvidenceStatus.ERROR
    assert NEEDLE not in outcome.model_dump_json()
    assert db_keys(redis_client) == before
    assert tool.calls.value == 0


def test_the_handle_lists_the_tools_the_run_may_call(redis_client: redis.Redis) -> None:
    registry = ToolRegistry()
    for name in ("a", "b", "c"):
        declare(registry, FakeTool(), name=name)
    declare(registry, FakeTool(), name="writer", read_only=False)
    boundary, _ = make_boundary(redis_client, registry)

    handle = boundary.for_run(make_run(tools=("c", "a", "writer")))

    assert [spec.name for spec in handle.tools()] == ["a", "c"]


def test_acall_leaves_the_event_loop_free(redis_client: redis.Redis) -> None:
    # Given a tool that finishes only once the event loop has run another coroutine
    started, release = threading.Event(), threading.Event()

    def waits_for_the_loop(arguments: dict[str, Any]) -> None:
        started.set()
        release.wait(timeout=20)

    registry = ToolRegistry()
    declare(registry, FakeTool(during=waits_for_the_loop))
    boundary, _ = make_boundary(redis_client, registry)
    handle = boundary.for_run(make_run(), timeout=30)

    async def releaser() -> None:
        # Not wait_until: this waits inside the event loop the tool needs (it must not block it)
        while not started.is_set():
            await asyncio.sleep(0.01)
        release.set()

    async def main() -> ToolOutcome:
        outcome, _ = await asyncio.gather(handle.acall("call_1", TOOL, {"query": "x"}), releaser())
        return outcome

    # When the call runs under acall
    outcome = asyncio.run(main())
    # Then the other coroutine ran while the tool waited (a blocked loop never releases it)
    assert release.is_set()
    assert outcome.status is InvocationStatus.READY


def test_an_id_or_name_that_is_not_a_string_is_refused_not_raised(
    redis_client: redis.Redis,
) -> None:
    registry = ToolRegistry()
    tool = FakeTool()
    declare(registry, tool)
    boundary, _ = make_boundary(redis_client, registry)
    handle = boundary.for_run(make_run())

    by_int_id = handle.call(17, TOOL, {"query": "x"})  # type: ignore[arg-type]
    by_int_name = handle.call("call_1", 17, {"query": "x"})  # type: ignore[arg-type]

    assert by_int_id == ToolOutcome.error(None, ErrorCode.INVALID_TOOL_CALL_ID)
    assert by_int_name == ToolOutcome.error("call_1", ErrorCode.UNKNOWN_TOOL)
    assert tool.calls.value == 0
