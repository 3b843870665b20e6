"""PostgreSQL values as JSON cells of a raw response."""

from __future__ import annotations

import math
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

_PLAIN = (str, int, bool, type(None))


def json_cell(value: Any) -> Any:
    """A value psycopg returned, as JSON: times in ISO 8601, an interval in seconds, a
    numeric as text (no precision lost), bytes in hex, anything else as its text."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list | tuple):
        return [json_cell(item) for item in value]
    if isinstance(value, dict):
        return {str(k): json_cell(v) for k, v in value.items()}
    return str(value)
