"""Strict argument parsing: RFC 8259 objects with unique keys, canonical JSON, UTF-8 sizes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from boundary import ErrorCode, Limits, canonical_json, utf8_size
from boundary.jsonargs import ArgumentsRejected, parse_arguments


def rejected_code(arguments: Any, limits: Limits | None = None) -> ErrorCode:
    with pytest.raises(ArgumentsRejected) as caught:
        parse_arguments(arguments, limits or Limits())
    return caught.value.code


@pytest.mark.parametrize(
    "arguments",
    [
        '{"b": {"y": 2, "x": 1}, "a": "é€😀"}',
        b'{"b": {"y": 2, "x": 1}, "a": "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}',
        bytearray('{"b": {"y": 2, "x": 1}, "a": "é€😀"}'.encode()),
        {"b": {"y": 2, "x": 1}, "a": "é€😀"},
    ],
    ids=["text", "bytes", "bytearray", "dict"],
)
def test_every_form_gives_the_same_canonical_request(arguments: Any) -> None:
    # Given the same object as text, bytes, bytearray or dict
    # When it is parsed
    parsed, request = parse_arguments(arguments, Limits())
    # Then the request is canonical JSON (sorted, compact, non-ASCII kept) and parses back
    assert request == '{"a":"é€😀","b":{"x":1,"y":2}}'
    assert parsed == {"a": "é€😀", "b": {"x": 1, "y": 2}}
    assert json.loads(request) == parsed


def test_request_is_exactly_the_documented_canonical_json() -> None:
    # Given arguments with numbers, booleans, null and nested lists
    value = {"n": [1, -0.0, 1.5, 10**30], "t": True, "f": False, "z": None, "s": 'a"b\\c\n'}
    # When they are parsed
    _, request = parse_arguments(value, Limits())
    # Then the request is json.dumps with the design's canonical options
    expected = json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
    )
    assert request == expected == canonical_json(value)


def test_parsed_arguments_are_a_fresh_plain_copy() -> None:
    # Given a dict argument holding a tuple
    value: dict[str, Any] = {"items": (1, 2), "inner": {"k": "v"}}
    # When it is parsed
    parsed, request = parse_arguments(value, Limits())
    # Then the executor gets plain JSON data that the caller cannot change afterwards
    assert parsed == {"items": [1, 2], "inner": {"k": "v"}}
    value["inner"]["k"] = "changed"
    assert parsed["inner"] == {"k": "v"}
    assert request == '{"inner":{"k":"v"},"items":[1,2]}'


@pytest.mark.parametrize(
    ("depth", "ok"),
    [(1, True), (2, True), (3, True), (4, False), (10, False)],
)
def test_depth_counts_every_object_and_array_level(depth: int, ok: bool) -> None:
    # Given a depth limit of 3 and alternating object/array nesting
    limits = Limits(max_json_depth=3)
    value: Any = "leaf"
    for level in range(depth - 1):
        value = [value] if level % 2 == 0 else {"k": value}
    arguments = {"root": value} if depth > 1 else {"root": "leaf"}
    # When it is parsed
    # Then only nesting up to the limit passes
    if ok:
        assert parse_arguments(arguments, limits)[0] == arguments
        assert parse_arguments(json.dumps(arguments), limits)[0] == arguments
    else:
        assert rejected_code(arguments, limits) is ErrorCode.INVALID_ARGUMENTS
        assert rejected_code(json.dumps(arguments), limits) is ErrorCode.INVALID_ARGUMENTS


def test_empty_containers_count_as_a_level() -> None:
    # Given a depth limit of 2
    limits = Limits(max_json_depth=2)
    # When an empty container sits at level 2, or at level 3
    # Then the first passes and the second is too deep
    assert parse_arguments('{"a": []}', limits)[1] == '{"a":[]}'
    assert rejected_code('{"a": [{}]}', limits) is ErrorCode.INVALID_ARGUMENTS


def test_self_referencing_dict_is_rejected_without_recursing_forever() -> None:
    # Given a dict that contains itself
    value: dict[str, Any] = {}
    value["self"] = value
    # When it is parsed
    # Then it is invalid (too deep), not a RecursionError
    assert rejected_code(value) is ErrorCode.INVALID_ARGUMENTS


def test_integers_beyond_the_conversion_limit_are_invalid_not_a_crash() -> None:
    # Given integers too long for Python's int/str conversion limit, as text and as a dict
    digits = "1" * 5000
    # When they are parsed
    # Then they are invalid arguments
    assert rejected_code('{"a": ' + digits + "}", Limits(max_request_bytes=100_000)) is (
        ErrorCode.INVALID_ARGUMENTS
    )
    assert rejected_code({"a": 10**5000}) is ErrorCode.INVALID_ARGUMENTS


def test_size_limit_is_inclusive_and_counted_in_utf8_bytes() -> None:
    # Given a 20-byte limit; '{"a":""}' is 8 bytes, "😀" is 4 bytes
    limits = Limits(max_request_bytes=20)
    # When 12 bytes of emoji are inside: 20 bytes
    _, request = parse_arguments({"a": "😀" * 3}, limits)
    # Then it fits exactly
    assert utf8_size(request) == 20
    # When one more byte is added
    # Then it is too large
    assert rejected_code({"a": "😀" * 3 + "x"}, limits) is ErrorCode.REQUEST_TOO_LARGE


def test_text_within_the_pre_parse_bound_is_parsed_and_measured_canonically() -> None:
    # Given a 16-byte limit and text of exactly 8 x 16 characters, mostly whitespace
    limits = Limits(max_request_bytes=16)
    text = '{"a":1' + " " * (8 * 16 - 7) + "}"
    assert len(text) == 8 * 16
    # When it is parsed
    _, request = parse_arguments(text, limits)
    # Then it passes: its canonical form is small
    assert request == '{"a":1}'
    # When the text is one character longer
    # Then it is refused before parsing
    assert rejected_code(text + " ", limits) is ErrorCode.REQUEST_TOO_LARGE


def test_rejection_messages_are_just_the_code() -> None:
    # Given arguments whose text holds a secret
    # When they are rejected
    with pytest.raises(ArgumentsRejected) as caught:
        parse_arguments('{"token": "sk-live-SECRET123", "token": 1}', Limits())
    # Then the exception says only the code, and chains no parser error
    assert str(caught.value) == "INVALID_ARGUMENTS"
    assert caught.value.__cause__ is None
