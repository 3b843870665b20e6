"""Byte limits and canonical JSON: every size is UTF-8 bytes of canonical JSON text."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Default cap on the canonical JSON of a call's arguments.
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024
#: Default cap on a tool's raw response.
DEFAULT_MAX_RAW_BYTES = 1024 * 1024
#: Default cap on a whole record (request + raw + agent result + metadata).
DEFAULT_MAX_RECORD_BYTES = 2 * 1024 * 1024
#: Default cap on the agent-facing result of one call.
DEFAULT_MAX_AGENT_RESULT_BYTES = 8 * 1024
#: Default cap on the nesting depth of arguments.
DEFAULT_MAX_JSON_DEPTH = 32
#: Default cap on the number of observed facts of a run.
DEFAULT_MAX_FACTS = 50
#: Default cap on the bytes of all observed facts of a run.
DEFAULT_MAX_FACTS_BYTES = 64 * 1024


class LimitFields(BaseModel):
    """The size limits' fields, defaults and bounds, declared once for ``Limits`` and for the
    worker settings (``tasks.settings.Settings``: one ``TOOL_BOUNDARY_*`` variable each)."""

    #: Largest request (the call's arguments, canonical JSON) preflight accepts; past it the
    #: call is refused REQUEST_TOO_LARGE and nothing is stored.
    max_request_bytes: int = Field(default=DEFAULT_MAX_REQUEST_BYTES, gt=0)
    #: Largest raw tool response kept in a record; past it the call ends RESULT_TOO_LARGE, the
    #: response neither stored nor truncated and the projector not run.
    max_raw_bytes: int = Field(default=DEFAULT_MAX_RAW_BYTES, gt=0)
    #: Largest whole record (request, raw response, result, scope) a seal may write.
    max_record_bytes: int = Field(default=DEFAULT_MAX_RECORD_BYTES, gt=0)
    #: Largest bounded result (with its scope) an agent may get; past it RESULT_TOO_LARGE.
    max_agent_result_bytes: int = Field(default=DEFAULT_MAX_AGENT_RESULT_BYTES, gt=0)
    #: Deepest nesting of the arguments' JSON preflight accepts (INVALID_ARGUMENTS past it).
    max_json_depth: int = Field(default=DEFAULT_MAX_JSON_DEPTH, gt=0)
    #: Most observed facts a run's observation returns; the rest are counted, never dropped
    #: silently.
    max_facts: int = Field(default=DEFAULT_MAX_FACTS, ge=0)
    #: Largest observation (its facts' canonical JSON); past it facts are cut and counted.
    max_facts_bytes: int = Field(default=DEFAULT_MAX_FACTS_BYTES, ge=0)


class Limits(LimitFields):
    """Size limits, enforced fail-closed."""

    model_config = ConfigDict(frozen=True, extra="forbid")


#: ``json.dumps`` with these options builds an encoder per call; one is enough (it keeps no
#: state between calls).
_CANONICAL = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """The one JSON text of ``value``: sorted keys, no spaces, no NaN, non-ASCII kept.

    Raises:
        TypeError, ValueError, RecursionError: ``value`` is not plain JSON data.
    """
    return _CANONICAL.encode(value)


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8.

    Raises:
        UnicodeEncodeError: ``text`` holds a lone surrogate, which no UTF-8 text can.
    """
    return len(text.encode("utf-8"))
