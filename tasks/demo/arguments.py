"""Argument checks shared by the example tools.

A tool validates its own arguments: the boundary only guarantees a JSON object. A bad
argument raises ``ValueError``, which the boundary turns into TOOL_EXECUTION_FAILED without
showing the message to the agent.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


def check_keys(arguments: Any, allowed: Collection[str]) -> Mapping[str, Any]:
    """The arguments object, refusing unknown keys (a typo must not widen a search)."""
    if not isinstance(arguments, Mapping):
        raise ValueError("arguments must be an object")
    unknown = set(arguments) - set(allowed)
    if unknown:
        raise ValueError(f"unknown arguments: {sorted(unknown)}")
    return arguments


def text_arg(
    arguments: Mapping[str, Any], key: str, *, max_chars: int, required: bool = True
) -> str | None:
    """A string argument, stripped, non-empty and at most ``max_chars`` long."""
    value = arguments.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key} must be a non-empty string")
    if len(value) > max_chars:
        raise ValueError(f"{key} must be at most {max_chars} characters")
    return value.strip()


def int_arg(arguments: Mapping[str, Any], key: str, *, default: int, low: int, high: int) -> int:
    """An integer argument within ``[low, high]``; booleans are not integers here."""
    value = arguments.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{key} must be an integer from {low} to {high}")
    return value
