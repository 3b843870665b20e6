"""The request fingerprint and the conflict code: what tells the same call from another one
under a used tool_call_id."""

from __future__ import annotations

import hashlib

from boundary import ErrorCode, canonical_json
from boundary.errors import PREFLIGHT_CODES, SEAL_CODES
from boundary.fingerprint import request_sha256


def test_fingerprint_is_the_sha256_of_the_canonical_json_of_tool_and_arguments() -> None:
    # Given a call's arguments as the record keeps them (canonical JSON)
    arguments = {"query": "zeitüberschreitung", "limit": 3, "filters": {"b": [1, 2], "a": None}}
    request = canonical_json(arguments)
    # When its fingerprint is taken
    fingerprint = request_sha256("search_logs", request)
    # Then it is the hex SHA-256 of the UTF-8 canonical JSON of {"tool", "arguments"}
    text = canonical_json({"tool": "search_logs", "arguments": arguments})
    assert fingerprint == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert len(fingerprint) == 64 and fingerprint == fingerprint.lower()


def test_fingerprint_tells_tools_and_arguments_apart_but_not_key_order() -> None:
    same = request_sha256("search", canonical_json({"a": 1, "b": 2}))
    assert same == request_sha256("search", canonical_json({"b": 2, "a": 1}))
    assert same != request_sha256("search", canonical_json({"a": 1, "b": 3}))
    assert same != request_sha256("search_logs", canonical_json({"a": 1, "b": 2}))
    # A tool name that looks like JSON cannot pass for other arguments
    assert request_sha256('x","arguments":{}', "{}") != request_sha256("x", "{}")


def test_conflict_is_a_refusal_before_execution_and_not_retryable() -> None:
    code = ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT
    assert code in PREFLIGHT_CODES and code not in SEAL_CODES
    assert not code.retryable
    assert not ErrorCode.DUPLICATE_TOOL_CALL.retryable
    assert code.message == "This tool call id was already used in this run for a different call."
    assert code.message != ErrorCode.DUPLICATE_TOOL_CALL.message
