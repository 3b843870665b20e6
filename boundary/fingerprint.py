"""A call's request fingerprint: what tells "the same call again" from "another call under a
used id" (``DUPLICATE_TOOL_CALL`` against ``DUPLICATE_TOOL_CALL_CONFLICT``, and ``replay``)."""

from __future__ import annotations

import hashlib

from boundary.limits import canonical_json


def request_sha256(tool_name: str, request: str) -> str:
    """SHA-256, lowercase hex, of the UTF-8 bytes of the canonical JSON of
    ``{"arguments": <arguments>, "tool": <tool_name>}``.

    ``request`` is the record's ``request`` field: the canonical JSON of the arguments object.
    The text hashed is exactly ``canonical_json({"arguments": arguments, "tool": tool_name})``
    (keys sorted, so ``arguments`` comes first), built without parsing ``request`` again. Two
    calls have the same fingerprint exactly when they name the same tool with equal arguments
    (key order and blanks of the model's text do not matter: canonical JSON removes them).
    """
    text = '{"arguments":' + request + ',"tool":' + canonical_json(tool_name) + "}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
