"""Substring search over a log file of ``<ts> <level> <service> <message>`` lines.

A plain case-insensitive substring, not a regular expression: an agent-written pattern
could make a regex engine backtrack for minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Levels the bundled log uses; a level filter must be one of them.
LEVELS = ("INFO", "WARN", "ERROR")


def parse_line(line: str) -> dict[str, str] | None:
    """The fields of one line, or ``None`` for a line that is not in the format."""
    parts = line.rstrip("\n").split(" ", 3)
    if len(parts) != 4:
        return None
    ts, level, service, message = parts
    return {"ts": ts, "level": level, "service": service, "message": message}


def read_lines(path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with path.open(encoding="utf-8") as log:
        for line in log:
            fields = parse_line(line)
            if fields is not None:
                yield line, fields


def search(
    path: Path, query: str, *, level: str | None = None, service: str | None = None
) -> list[dict[str, Any]]:
    """Every line that contains ``query`` (any case) and passes the filters, in file order."""
    needle = query.casefold()
    return [
        fields
        for line, fields in read_lines(path)
        if needle in line.casefold()
        and (level is None or fields["level"] == level)
        and (service is None or fields["service"] == service)
    ]
