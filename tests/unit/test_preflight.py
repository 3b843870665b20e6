"""Preflight as a pure function: every rejection it owns, in the spec's order, without I/O.

Rejections that need the store (duplicates, budgets, an unreachable store) and the proof that
no record is written are in ``tests/integration/test_preflight_rejections.py``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from boundary import ErrorCode, Limits, ToolRegistry
from boundary.preflight import Accepted, Rejected, preflight
from tests.support.helpers import RUN_ID, TOOL, FakeTool, envelope, make_run, register

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def stable_repr(value: object) -> str:
    """A parameter's id without an object's address: every xdist worker collects the same."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


UNSAFE_IDS = [
    None,
    "",
    " a",
    "a ",
    "a b",
    "a:b",
    "{a}",
    "a}",
    "a\n",
    "a\t",
    "a\x00",
    "a/b",
    "-a",
    "_a",
    ".a",
    "a" * 129,
    "café",
    "ａ",  # fullwidth letter: not ASCII
    "١",  # Arabic-Indic digit one: a digit, but not ASCII
]

SAFE_IDS = ["a", "0", "call_A.b-9", "toolu_01A.b-c_d", "a" * 128, "A-._"]


def forms(value: dict[str, Any]) -> list[Any]:
    """The same arguments as JSON text, UTF-8 bytes and a dict."""
    text = json.dumps(value, ensure_ascii=False)
    return [text, text.encode("utf-8"), value]


def nested(depth: int, container: str = "object") -> dict[str, Any]:
    """A top-level object whose nesting (the object itself counted) is ``depth``."""
    inner: Any = 1
    for _ in range(depth - 1):
        inner = {"k": inner} if container == "object" else [inner]
    return {"k": inner}


@pytest.fixture
def tool(registry: ToolRegistry) -> FakeTool:
    executor, _ = register(registry)
    return executor


def check(
    registry: ToolRegistry,
    arguments: Any = '{"query": "timeout"}',
    *,
    tool_call_id: str | None = "call_1",
    run_id: str | None = RUN_ID,
    tool_name: str | None = TOOL,
    limits: Limits | None = None,
    context_run_id: str = RUN_ID,
    **run_fields: Any,
) -> Accepted | Rejected:
    return preflight(
        envelope(tool_call_id, arguments, run_id=run_id, tool_name=tool_name),
        make_run(context_run_id, **run_fields),
        registry,
        limits or Limits(),
        now=NOW,
    )


def assert_rejected(result: Accepted | Rejected, code: ErrorCode) -> None:
    assert isinstance(result, Rejected)
    assert result.code is code


@pytest.mark.parametrize("tool_call_id", UNSAFE_IDS)
def test_blank_or_unsafe_tool_call_id_is_rejected(
    registry: ToolRegistry, tool: FakeTool, tool_call_id: str | None
) -> None:
    # Given an envelope whose framework id is missing or unsafe
    # When it is checked
    result = check(registry, tool_call_id=tool_call_id)
    # Then it is refused and the tool is not run
    assert_rejected(result, ErrorCode.INVALID_TOOL_CALL_ID)
    assert tool.calls.value == 0


@pytest.mark.parametrize("tool_call_id", SAFE_IDS)
def test_safe_tool_call_id_is_accepted_exactly_as_given(
    registry: ToolRegistry, tool: FakeTool, tool_call_id: str
) -> None:
    # Given a safe framework id
    # When it is checked
    result = check(registry, tool_call_id=tool_call_id)
    # Then the canonical key holds that exact id and the run's id
    assert isinstance(result, Accepted)
    assert result.key.tool_call_id == tool_call_id
    assert result.key.run_id == RUN_ID


@pytest.mark.parametrize("envelope_run_id", ["run-2", "RUN-1", "run-1 ", "", None])
def test_cross_run_envelope_is_rejected(
    registry: ToolRegistry, tool: FakeTool, envelope_run_id: str | None
) -> None:
    # Given an envelope that names another run than the RunContext
    # When it is checked
    result = check(registry, run_id=envelope_run_id)
    # Then it is refused as a run id mismatch
    assert_rejected(result, ErrorCode.RUN_ID_MISMATCH)


def test_unsafe_run_context_id_is_rejected_even_when_the_envelope_agrees(
    registry: ToolRegistry, tool: FakeTool
) -> None:
    # Given a run whose own id is unsafe, and an envelope that repeats it
    # When the call is checked
    result = check(registry, run_id="run:1", context_run_id="run:1")
    # Then no key can be built from it: the call is refused
    assert_rejected(result, ErrorCode.RUN_ID_MISMATCH)


@pytest.mark.parametrize(
    "arguments",
    [
        "[]",
        '[{"a": 1}]',
        '"text"',
        "42",
        "4.5",
        "null",
        "true",
        "",
        "   ",
        "{",
        '{"a": 1} trailing',
        "{'a': 1}",
        '{"a": 1,}',
        "\ufeff{}",
        b"[]",
        b"null",
        b"",
        [],
        [{"a": 1}],
        b"[1, 2]",
        42,
        4.5,
        True,
        None,
        object(),
    ],
    ids=stable_repr,
)
def test_arguments_that_are_not_a_json_object_are_rejected(
    registry: ToolRegistry, tool: FakeTool, arguments: Any
) -> None:
    # Given arguments whose top level is not a JSON object (or not JSON at all)
    # When they are checked
    result = check(registry, arguments)
    # Then they are invalid
    assert_rejected(result, ErrorCode.INVALID_ARGUMENTS)


@pytest.mark.parametrize(
    "arguments",
    [
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": -Infinity}',
        '{"a": [1, NaN]}',
        '{"a": 1e400}',  # overflows to infinity when parsed
        b'{"a": NaN}',
        {"a": float("nan")},
        {"a": float("inf")},
        {"a": {"b": [float("-inf")]}},
    ],
    ids=repr,
)
def test_nan_and_infinity_are_rejected(
    registry: ToolRegistry, tool: FakeTool, arguments: Any
) -> None:
    # Given arguments holding a number JSON cannot express
    # When they are checked
    result = check(registry, arguments)
    # Then they are invalid, whatever form they came in
    assert_rejected(result, ErrorCode.INVALID_ARGUMENTS)


@pytest.mark.parametrize(
    "arguments",
    [
        '{"a": 1, "a": 2}',
        '{"a": 1, "a": 1}',
        '{"o": {"k": 1, "k": 2}}',
        '{"l": [{"k": 1, "k": 2}]}',
        b'{"a": 1, "a": 2}',
    ],
)
def test_duplicate_keys_are_rejected(
    registry: ToolRegistry, tool: FakeTool, arguments: str | bytes
) -> None:
    # Given JSON text with a repeated key (even with the same value, even nested)
    # When it is checked
    result = check(registry, arguments)
    # Then it is invalid: a last-wins parse would silently change the request
    assert_rejected(result, ErrorCode.INVALID_ARGUMENTS)


@pytest.mark.parametrize(
    "arguments",
    [
        b'{"a": "\xff"}',
        b'{"a": "\xc3"}',  # truncated two-byte sequence
        b'{"a": "\xed\xa0\x80"}',  # an encoded surrogate: not valid UTF-8
        b'{"\xfe": 1}',
        bytearray(b'{"a": "\x80"}'),
    ],
    ids=repr,
)
def test_invalid_utf8_bytes_are_rejected(
    registry: ToolRegistry, tool: FakeTool, arguments: bytes
) -> None:
    # Given argument bytes that are not UTF-8
    # When they are checked
    result = check(registry, arguments)
    # Then they are invalid
    assert_rejected(result, ErrorCode.INVALID_ARGUMENTS)


@pytest.mark.parametrize(
    "arguments",
    [
        '{"a": "\\ud800"}',  # escaped lone high surrogate in JSON text
        '{"a": "x\\udfff"}',  # escaped lone low surrogate
        '{"\\ud800": 1}',  # in a key
        '{"a": "\ud800"}',  # a lone surrogate in the Python text itself
        {"a": "\udc00"},
        {"\ud83d": "key"},
        {"a": ["ok", {"b": "\ud800"}]},
    ],
    ids=repr,
)
def test_lone_surrogates_are_rejected(
    registry: ToolRegistry, tool: FakeTool, arguments: Any
) -> None:
    # Given arguments holding a lone surrogate, which has no UTF-8 form
    # When they are checked
    result = check(registry, arguments)
    # Then they are invalid
    assert_rejected(result, ErrorCode.INVALID_ARGUMENTS)


def test_an_escaped_surrogate_pair_is_one_valid_character(
    registry: ToolRegistry, tool: FakeTool
) -> None:
    # Given a well-formed surrogate pair escape
    # When it is checked
    result = check(registry, '{"a": "\\ud83d\\ude00"}')
    # Then it is the one character it encodes
    assert isinstance(result, Accepted)
    assert result.arguments == {"a": "\U0001f600"}
    assert result.request == '{"a":"\U0001f600"}'


@pytest.mark.parametrize(
    "arguments",
    [{1: "a"}, {"a": {2: "b"}}, {"a": {1, 2}}, {"a": b"bytes"}, {"a": object()}, {(1,): 1}],
    ids=stable_repr,
)
def test_dicts_holding_non_json_data_are_rejected(
    registry: ToolRegistry, tool: FakeTool, arguments: dict[Any, Any]
) -> None:
    # Given a dict that is not plain JSON data (non-string keys, sets, bytes, objects)
    # When it is checked
    result = check(registry, arguments)
    # Then it is invalid
    assert_rejected(result, ErrorCode.INVALID_ARGUMENTS)


@pytest.mark.parametrize("container", ["object", "array"])
def test_nesting_deeper_than_the_limit_is_rejected(
    registry: ToolRegistry, tool: FakeTool, container: str
) -> None:
    # Given a depth limit, and arguments exactly at it and one level past it
    limits = Limits()
    depth = limits.max_json_depth
    for arguments in forms(nested(depth, container)):
        # When the one at the limit is checked
        # Then it is accepted
        assert isinstance(check(registry, arguments, limits=limits), Accepted)
    for arguments in forms(nested(depth + 1, container)):
        # When the one past the limit is checked
        # Then it is invalid, in every form
        assert_rejected(check(registry, arguments, limits=limits), ErrorCode.INVALID_ARGUMENTS)


def test_nesting_far_beyond_the_parser_recursion_limit_is_rejected(
    registry: ToolRegistry, tool: FakeTool
) -> None:
    # Given JSON text nested 100,000 levels deep (small in bytes)
    text = '{"a":' * 100_000 + "1" + "}" * 100_000
    # When it is checked with a request limit that lets it through the size check
    result = check(registry, text, limits=Limits(max_request_bytes=1_000_000))
    # Then it is invalid, and preflight did not raise
    assert_rejected(result, ErrorCode.INVALID_ARGUMENTS)


def test_request_over_the_limit_is_rejected_in_utf8_bytes(
    registry: ToolRegistry, tool: FakeTool
) -> None:
    # Given a 64-byte request limit; '{"q":""}' is 8 bytes of canonical JSON
    limits = Limits(max_request_bytes=64)
    fits = {"q": "x" * 56}
    # "€" is 3 bytes in UTF-8: 19 of them make 65 bytes with only 27 characters
    too_large = {"q": "€" * 19}
    for arguments in forms(fits):
        # When a request of exactly 64 bytes is checked
        # Then it is accepted
        result = check(registry, arguments, limits=limits)
        assert isinstance(result, Accepted)
        assert len(result.request.encode("utf-8")) == 64
    for arguments in forms(too_large):
        # When a request of 65 bytes (but fewer characters) is checked
        # Then it is refused as too large
        assert_rejected(check(registry, arguments, limits=limits), ErrorCode.REQUEST_TOO_LARGE)


def test_request_size_is_measured_on_canonical_json_not_on_the_text_sent(
    registry: ToolRegistry, tool: FakeTool
) -> None:
    # Given text padded with whitespace far past the limit, whose canonical form fits
    limits = Limits(max_request_bytes=64)
    text = '{ "q" :' + " " * 300 + '"x" }'
    # When it is checked
    result = check(registry, text, limits=limits)
    # Then it is accepted, and the request is the compact canonical JSON
    assert isinstance(result, Accepted)
    assert result.request == '{"q":"x"}'


def test_huge_text_is_refused_before_parsing(registry: ToolRegistry, tool: FakeTool) -> None:
    # Given text many times larger than the request limit, and not even JSON
    limits = Limits(max_request_bytes=16)
    # When it is checked
    result = check(registry, "x" * 10_000, limits=limits)
    # Then it is too large (and never parsed)
    assert_rejected(result, ErrorCode.REQUEST_TOO_LARGE)


@pytest.mark.parametrize("tool_name", ["unknown", "", None, "SEARCH", "search "])
def test_unknown_tool_is_rejected(
    registry: ToolRegistry, tool: FakeTool, tool_name: str | None
) -> None:
    # Given a tool name no spec is registered under
    # When the call is checked
    result = check(registry, tool_name=tool_name, tools=(TOOL, "unknown"))
    # Then it is an unknown tool
    assert_rejected(result, ErrorCode.UNKNOWN_TOOL)


def test_unauthorized_tool_is_rejected(registry: ToolRegistry, tool: FakeTool) -> None:
    # Given a registered read-only tool the run is not authorized for
    # When the call is checked
    result = check(registry, tools=("other",))
    # Then it is unauthorized
    assert_rejected(result, ErrorCode.UNAUTHORIZED)
    assert tool.calls.value == 0


def test_writable_tool_is_rejected(registry: ToolRegistry) -> None:
    # Given an authorized tool registered with read_only=False
    writer, _ = register(registry, name="write", read_only=False)
    # When the call is checked
    result = check(registry, tool_name="write", tools=("write",))
    # Then it is refused as not read-only
    assert_rejected(result, ErrorCode.NOT_READ_ONLY)
    assert writer.calls.value == 0


def test_inactive_run_is_rejected(registry: ToolRegistry, tool: FakeTool) -> None:
    # Given a run that is no longer active
    # When a call is checked
    result = check(registry, active=False)
    # Then it is refused
    assert_rejected(result, ErrorCode.RUN_INACTIVE)


@pytest.mark.parametrize("past", [timedelta(0), timedelta(microseconds=1), timedelta(hours=1)])
def test_run_past_its_deadline_is_rejected(
    registry: ToolRegistry, tool: FakeTool, past: timedelta
) -> None:
    # Given a run whose deadline is now or earlier
    # When a call is checked
    result = check(registry, deadline=NOW - past)
    # Then it is refused
    assert_rejected(result, ErrorCode.RUN_DEADLINE_EXCEEDED)


def test_run_before_its_deadline_is_accepted(registry: ToolRegistry, tool: FakeTool) -> None:
    # Given a run whose deadline is a moment away
    # When a call is checked
    result = check(registry, deadline=NOW + timedelta(milliseconds=1))
    # Then it passes
    assert isinstance(result, Accepted)


def test_accepted_call_carries_canonical_request_and_parsed_arguments(
    registry: ToolRegistry, tool: FakeTool
) -> None:
    # Given the same arguments as JSON text, bytes and a dict, keys unsorted, non-ASCII text
    value = {"z": 1, "query": "délai €", "a": [True, None, 1.5]}
    for arguments in forms(value):
        # When each is checked
        result = check(registry, arguments)
        # Then each gives the same canonical request and a plain dict equal to the input
        assert isinstance(result, Accepted)
        assert result.request == '{"a":[true,null,1.5],"query":"délai €","z":1}'
        assert result.arguments == value
        assert result.spec.name == TOOL


def test_checks_follow_the_spec_order(registry: ToolRegistry) -> None:
    # Given a call with every problem at once: unsafe id, other run, a list as arguments,
    # a writable tool the run is not authorized for, an inactive run past its deadline
    register(registry, name="write", read_only=False)
    fields: dict[str, Any] = {
        "tool_call_id": "a:b",
        "run_id": "run-2",
        "arguments": "[]",
        "tool_name": "write",
        "tools": ("other",),
        "active": False,
        "deadline": NOW,
    }
    # When the problems are fixed one at a time
    # Then each check reports the first remaining problem, in the spec's order
    steps: list[tuple[str, Any, ErrorCode]] = [
        ("tool_call_id", "call_1", ErrorCode.INVALID_TOOL_CALL_ID),
        ("run_id", RUN_ID, ErrorCode.RUN_ID_MISMATCH),
        ("arguments", "{}", ErrorCode.INVALID_ARGUMENTS),
        ("tools", ("write", TOOL), ErrorCode.UNAUTHORIZED),
        ("tool_name", TOOL, ErrorCode.NOT_READ_ONLY),
        ("active", True, ErrorCode.RUN_INACTIVE),
        ("deadline", None, ErrorCode.RUN_DEADLINE_EXCEEDED),
    ]
    register(registry)
    for name, fixed, code in steps:
        assert_rejected(check(registry, **fields), code)
        fields[name] = fixed
    assert isinstance(check(registry, **fields), Accepted)
