"""Hostile input through the whole boundary (real Redis, steps in-process): Python objects whose
own code raises while they are iterated, compared or serialized, as arguments and as a tool's
raw response, and ids no record can have. Nothing raises; every answer is a stable code."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundary import (
    ErrorCode,
    InvocationStatus,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
    ToolSpec,
)
from tests.support.helpers import FakeProjector, make_boundary

RUN_ID = "run-fuzz"


class _Boom(Exception):
    """What hostile objects raise: no exception type a caller could expect."""


class RaisingItems(dict[str, Any]):
    """A dict whose views raise (json and our checks iterate through them)."""

    def items(self) -> Any:
        raise _Boom

    def keys(self) -> Any:
        raise _Boom

    def __iter__(self) -> Iterator[str]:
        raise _Boom


class RaisingMapping(Mapping[str, Any]):
    """A Mapping (not a dict) whose every method raises something different."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __getitem__(self, key: str) -> Any:
        raise ZeroDivisionError

    def __iter__(self) -> Iterator[str]:
        if self.where == "iter":
            raise LookupError
        return iter(["a"])

    def __len__(self) -> int:
        if self.where == "len":
            raise OverflowError
        return 1


class MutatingMapping(dict[str, Any]):
    """A dict that changes size while it is iterated."""

    def items(self) -> Any:
        for item in list(super().items()):
            self[f"{item[0]}x"] = 1
            yield item


class BadEq(str):
    """A str subclass whose comparisons and hash raise (sorting keys compares them)."""

    def __lt__(self, other: object) -> bool:
        raise _Boom

    def __hash__(self) -> int:
        return str.__hash__(self)


class Opaque:
    """Not JSON at all."""


def _hostile_leaf(kind: str) -> Any:
    return {
        "items": RaisingItems(a=1),
        "iter": RaisingMapping("iter"),
        "len": RaisingMapping("len"),
        "getitem": RaisingMapping("getitem"),
        "mutating": MutatingMapping(a=1, b=2),
        "badeq": {BadEq("b"): 1, BadEq("a"): 2},
        "opaque": Opaque(),
        "set": {1, 2},
        "bytes": b"\xff",
        "nan": float("nan"),
        "surrogate": "\ud800",
        "bigint": 10**5000,
        "tuplekey": {(1, 2): 3},
        "mixedkeys": {1: "a", "b": 2},
    }[kind]


HOSTILE_KINDS = [
    "items",
    "iter",
    "len",
    "getitem",
    "mutating",
    "badeq",
    "opaque",
    "set",
    "bytes",
    "nan",
    "surrogate",
    "bigint",
    "tuplekey",
    "mixedkeys",
]
hostile = st.sampled_from(HOSTILE_KINDS).map(_hostile_leaf)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)
)
values = st.recursive(
    st.one_of(json_scalars, hostile),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
#: Arguments: mostly objects, some with hostile values or hostile themselves.
arguments = st.one_of(
    st.dictionaries(st.text(max_size=6), values, max_size=4),
    hostile,
    values,
    st.dictionaries(st.text(max_size=6), json_scalars, max_size=3).map(json.dumps),
)
#: What the tool returns: its raw response (may be hostile too).
raws = st.one_of(values, st.dictionaries(st.text(max_size=6), values, max_size=3))
ids = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True),
    st.text(max_size=6),
    st.none(),
)

#: Every code a call may end with here.
EXPECTED_CODES = {
    ErrorCode.INVALID_TOOL_CALL_ID,
    ErrorCode.RUN_ID_MISMATCH,
    ErrorCode.INVALID_ARGUMENTS,
    ErrorCode.REQUEST_TOO_LARGE,
    ErrorCode.UNKNOWN_TOOL,
    ErrorCode.DUPLICATE_TOOL_CALL,
    ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT,
    ErrorCode.SERIALIZATION_FAILED,
    ErrorCode.RESULT_TOO_LARGE,
    ErrorCode.PROJECTION_FAILED,
}


class ReturnsRaw:
    """A tool returning whatever the test put in ``raw`` for the next call."""

    def __init__(self) -> None:
        self.raw: Any = None

    def __call__(self, arguments: dict[str, Any]) -> Any:
        return self.raw


@pytest.fixture
def fuzz_boundary(redis_client: redis.Redis) -> tuple[ToolBoundary, ReturnsRaw]:
    tool = ReturnsRaw()
    registry = ToolRegistry()
    registry.register(
        ToolSpec(name="search", executor=tool, projector=FakeProjector(), read_only=True)
    )
    boundary, _ = make_boundary(redis_client, registry, ttl_s=120)
    return boundary, tool


FUZZ = settings(
    max_examples=int(os.environ.get("TB_FUZZ_EXAMPLES", "4000")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.mark.slow
@FUZZ
@given(
    tool_call_id=ids,
    run_id=st.one_of(st.just(RUN_ID), st.text(max_size=4)),
    tool_name=st.sampled_from(["search", "nope"]),
    args=arguments,
    raw=raws,
)
def test_hostile_input_never_raises_and_ends_with_a_stable_code(
    fuzz_boundary: tuple[ToolBoundary, ReturnsRaw],
    tool_call_id: str | None,
    run_id: str,
    tool_name: str,
    args: Any,
    raw: Any,
) -> None:
    boundary, tool = fuzz_boundary
    tool.raw = raw
    run = RunContext(run_id=RUN_ID, authorized_tools=frozenset({"search"}))
    call = ToolCallEnvelope(
        run_id=run_id, tool_call_id=tool_call_id, tool_name=tool_name, arguments=args
    )
    # When any such call is submitted and its outcome read
    outcome = boundary.invoke(call, run, timeout=5)
    # Then it is an outcome, never an exception: READY, or ERROR with an expected code
    if outcome.status is InvocationStatus.ERROR:
        assert outcome.error_code in EXPECTED_CODES
        assert outcome.result is None
    else:
        assert outcome.status is InvocationStatus.READY
    # And a run can be observed even under an id no record can have (the fuzzed run itself
    # is observed once, at the end: reading it after every call would grow with the run)
    if run_id != RUN_ID:
        assert boundary.observe(run_id).facts == ()


def test_a_raw_response_whose_items_raise_is_sealed_serialization_failed(
    fuzz_boundary: tuple[ToolBoundary, ReturnsRaw],
) -> None:
    # Given a tool whose raw response raises while it is serialized
    boundary, tool = fuzz_boundary
    tool.raw = {"hits": RaisingItems(a=1)}
    run = RunContext(run_id=RUN_ID, authorized_tools=frozenset({"search"}))
    call = ToolCallEnvelope(run_id=RUN_ID, tool_call_id="c1", tool_name="search", arguments={})
    # When it is called
    outcome = boundary.invoke(call, run, timeout=5)
    # Then the call ends SERIALIZATION_FAILED (not STORE_UNAVAILABLE, not an exception)
    assert outcome.error_code is ErrorCode.SERIALIZATION_FAILED


@pytest.mark.parametrize("kind", ["items", "iter", "len", "getitem", "badeq"])
def test_arguments_whose_own_code_raises_are_invalid_arguments(
    fuzz_boundary: tuple[ToolBoundary, ReturnsRaw], kind: str
) -> None:
    boundary, _ = fuzz_boundary
    run = RunContext(run_id=RUN_ID, authorized_tools=frozenset({"search"}))
    for n, args in enumerate([_hostile_leaf(kind), {"nested": _hostile_leaf(kind)}]):
        call = ToolCallEnvelope(
            run_id=RUN_ID, tool_call_id=f"c{n}", tool_name="search", arguments=args
        )
        submission = boundary.submit(call, run)
        assert submission.outcome is not None
        assert submission.outcome.error_code is ErrorCode.INVALID_ARGUMENTS


def test_observe_on_a_lone_surrogate_run_id_is_empty_not_an_exception(
    fuzz_boundary: tuple[ToolBoundary, ReturnsRaw],
) -> None:
    boundary, _ = fuzz_boundary
    facts = boundary.observe("run-\ud800")
    assert facts.facts == ()
    assert facts.excluded == {}
