"""Projector for log search tools: matching lines become counts, a time range and a few lines.

Raw response read (any tool of this kind)::

    {"query": "...", "lines": [{"ts": "2025-03-14T10:41:07.412Z", "level": "ERROR",
                                "service": "api", "message": "..."}, ...]}

``message`` is required; ``ts``, ``level`` and ``service`` may be missing or null. Lines are
shown in the order given (the log's order), the counts cover every line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from boundary.models import Projection
from projectors._fit import (
    DEFAULT_MAX_BYTES,
    MalformedRawError,
    bounded_projection,
    build_scope,
    check_max_bytes,
    label,
    shorten,
    shrink_text,
)

#: Lines shown at most; the other matches are counted in ``omitted``.
DEFAULT_MAX_LINES = 20
#: Cap on one message's JSON bytes: a stack dump in one line must not crowd out the others.
DEFAULT_MAX_MESSAGE_BYTES = 400
#: A message cut shorter than this is not worth showing: the line is counted as omitted.
MIN_MESSAGE_BYTES = 48
#: Distinct levels or services counted by name; the rest are summed under ``OTHER_KEY``.
MAX_COUNT_KEYS = 8
OTHER_KEY = "(other)"
#: Counted under this when a line has no level or service.
UNKNOWN_KEY = "(unknown)"
#: The request arguments that say what was searched.
DEFAULT_SCOPE_KEYS = ("query", "level", "service")

_FIELDS = ("ts", "level", "service")


class LogSearchProjector:
    """Counts matches by level and service, gives their time range and the first lines.

    NO_EVIDENCE when nothing matched; the scope (corpus, query, filters) says where.

    Args:
        max_bytes: bound on UTF-8 bytes of canonical JSON of result plus scope.
        max_lines: lines shown at most.
        max_message_bytes: cap on one message.
        corpus: names what was searched, in the scope.
        scope_keys: the request arguments copied into the scope.
    """

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_lines: int = DEFAULT_MAX_LINES,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        corpus: str = "logs",
        scope_keys: Sequence[str] = DEFAULT_SCOPE_KEYS,
    ) -> None:
        if max_lines < 1 or max_message_bytes < MIN_MESSAGE_BYTES:
            raise ValueError("max_lines must be >= 1 and max_message_bytes >= MIN_MESSAGE_BYTES")
        self.max_bytes = check_max_bytes(max_bytes)
        self.max_lines = max_lines
        self.max_message_bytes = max_message_bytes
        self.corpus = label(corpus)
        self.scope_keys = tuple(scope_keys)

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        lines = _read_lines(raw)
        scope = build_scope(self.corpus, request, self.scope_keys)
        timestamps = [line["ts"] for line in lines if line.get("ts") is not None]
        summary = {
            "matches": len(lines),
            "by_level": count_by(line.get("level") for line in lines),
            "by_service": count_by(line.get("service") for line in lines),
            "first_ts": label(min(timestamps)) if timestamps else None,
            "last_ts": label(max(timestamps)) if timestamps else None,
        }
        candidates = [self._item(line) for line in lines[: self.max_lines]]

        def render(shown: Sequence[dict[str, Any]]) -> dict[str, Any]:
            return {**summary, "lines": list(shown), "omitted": len(lines) - len(shown)}

        return bounded_projection(
            candidates, render, scope, self.max_bytes, found=bool(lines), shrink=_shrink
        )

    def _item(self, line: Mapping[str, Any]) -> dict[str, Any]:
        item: dict[str, Any] = {
            field: label(line[field]) for field in _FIELDS if line.get(field) is not None
        }
        item["message"], cut = shorten(line["message"], self.max_message_bytes)
        if cut:
            item["truncated"] = True
        return item


def count_by(values: Iterable[Any], max_keys: int = MAX_COUNT_KEYS) -> dict[str, int]:
    """Counts by value, most frequent first; beyond ``max_keys`` names the rest are summed
    under ``OTHER_KEY``, so the counts stay small whatever the raw data holds."""
    counts = Counter(UNKNOWN_KEY if value is None else label(value) for value in values)
    ranked = sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))
    if len(ranked) <= max_keys:
        return dict(ranked)
    kept = dict(ranked[: max_keys - 1])
    kept[OTHER_KEY] = sum(count for _, count in ranked[max_keys - 1 :])
    return kept


def _shrink(item: dict[str, Any], max_json_bytes: int) -> dict[str, Any] | None:
    """The line with its message cut to fit, or ``None`` when too little would be left."""
    return shrink_text(item, max_json_bytes, field="message", min_bytes=MIN_MESSAGE_BYTES)


def _read_lines(raw: Any) -> list[Mapping[str, Any]]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("lines"), list):
        raise MalformedRawError("lines")
    for i, line in enumerate(raw["lines"]):
        if not isinstance(line, Mapping) or not isinstance(line.get("message"), str):
            raise MalformedRawError(f"lines[{i}].message")
        for field in _FIELDS:
            if not isinstance(line.get(field), str | None):
                raise MalformedRawError(f"lines[{i}].{field}")
    return list(raw["lines"])
