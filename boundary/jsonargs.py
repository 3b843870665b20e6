"""Strict parsing of tool arguments: RFC 8259 JSON objects with unique keys, nothing else."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from boundary.errors import ErrorCode
from boundary.limits import Limits, canonical_json, utf8_size

#: Raw argument text larger than this many times the request limit is refused before parsing,
#: so a huge input costs no parse. Canonical JSON only shrinks text by dropping whitespace.
_PRE_PARSE_FACTOR = 8


class ArgumentsRejected(Exception):
    """Arguments failed a check; ``code`` says which."""

    def __init__(self, code: ErrorCode) -> None:
        self.code = code
        super().__init__(code.value)


def _no_constants(name: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate object key")
        result[key] = value
    return result


def _depth_and_types(value: Any, max_depth: int) -> None:
    """Refuses nesting deeper than ``max_depth`` and anything that is not plain JSON data."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            if depth > max_depth:
                raise ArgumentsRejected(ErrorCode.INVALID_ARGUMENTS)
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ArgumentsRejected(ErrorCode.INVALID_ARGUMENTS)
                stack.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            if depth > max_depth:
                raise ArgumentsRejected(ErrorCode.INVALID_ARGUMENTS)
            stack.extend((child, depth + 1) for child in item)
        elif item is None or isinstance(item, str | bool | int | float):
            continue
        else:
            raise ArgumentsRejected(ErrorCode.INVALID_ARGUMENTS)


def parse_arguments(arguments: Any, limits: Limits) -> tuple[dict[str, Any], str]:
    """Validates ``arguments`` and returns them parsed and as canonical JSON text.

    ``arguments`` is JSON text (``str`` or UTF-8 ``bytes``) or a ``dict``.

    Raises:
        ArgumentsRejected: with INVALID_ARGUMENTS or REQUEST_TOO_LARGE, and nothing else: a
            caller's object may run arbitrary code when iterated, compared or measured (a
            ``Mapping`` whose ``items()`` raises), and whatever it raises is bad input too.
    """
    try:
        return _parse_arguments(arguments, limits)
    except ArgumentsRejected:
        raise
    except Exception:
        raise ArgumentsRejected(ErrorCode.INVALID_ARGUMENTS) from None


def _parse_arguments(arguments: Any, limits: Limits) -> tuple[dict[str, Any], str]:
    invalid = ArgumentsRejected(ErrorCode.INVALID_ARGUMENTS)
    if isinstance(arguments, bytes | bytearray):
        try:
            arguments = bytes(arguments).decode("utf-8")
        except UnicodeDecodeError:
            raise invalid from None
    if isinstance(arguments, str):
        if len(arguments) > limits.max_request_bytes * _PRE_PARSE_FACTOR:
            raise ArgumentsRejected(ErrorCode.REQUEST_TOO_LARGE)
        try:
            parsed = json.loads(
                arguments, object_pairs_hook=_unique_pairs, parse_constant=_no_constants
            )
        except (ValueError, RecursionError):
            raise invalid from None
    elif isinstance(arguments, Mapping):
        parsed = arguments
    else:
        raise invalid
    if not isinstance(parsed, Mapping):
        raise invalid
    _depth_and_types(parsed, limits.max_json_depth)
    try:
        text = canonical_json(parsed)
        size = utf8_size(text)
    except (TypeError, ValueError, RecursionError):
        # ValueError covers NaN/Infinity floats and lone surrogates (UnicodeEncodeError).
        raise invalid from None
    if size > limits.max_request_bytes:
        raise ArgumentsRejected(ErrorCode.REQUEST_TOO_LARGE)
    # Return a plain dict that round-trips, whatever Mapping came in.
    return json.loads(text), text
