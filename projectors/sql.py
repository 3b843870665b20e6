"""Projector for SQL read tools: a result set becomes its columns, first rows and row count.

Raw response read (any tool of this kind)::

    {"columns": ["id", "title"], "rows": [[1, "..."], ...], "more_rows": false}

``more_rows`` (optional) says the tool stopped at its own row cap, so ``row_count`` is a
lower bound. Cells may be any JSON value; long ones are cut and marked with ``…``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from boundary.models import Projection
from projectors._fit import (
    DEFAULT_MAX_BYTES,
    MalformedRawError,
    bounded_projection,
    bounded_value,
    build_scope,
    check_max_bytes,
    label,
)

#: Rows shown at most; the others are counted in ``omitted``.
DEFAULT_MAX_ROWS = 50
#: Columns shown at most (a ``SELECT *`` over a wide table); the others are counted.
DEFAULT_MAX_COLUMNS = 16
#: Cap on one cell's JSON bytes; a longer cell is cut and ends with ``…``.
DEFAULT_MAX_CELL_BYTES = 256
#: The request arguments that say what was read.
DEFAULT_SCOPE_KEYS = ("sql",)


class _Row(NamedTuple):
    cells: list[Any]
    #: How many of ``cells`` were cut.
    cut: int


class SqlRowsProjector:
    """Shows the columns, the first rows and the row count of a result set.

    NO_EVIDENCE for zero rows: the scope (corpus, statement) says what returned nothing.

    Args:
        max_bytes: bound on UTF-8 bytes of canonical JSON of result plus scope.
        max_rows: rows shown at most.
        max_columns: columns shown at most; the cells of the others are left out too.
        max_cell_bytes: cap on one cell.
        corpus: names the database, in the scope.
        scope_keys: the request arguments copied into the scope.
    """

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_columns: int = DEFAULT_MAX_COLUMNS,
        max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES,
        corpus: str = "sql",
        scope_keys: Sequence[str] = DEFAULT_SCOPE_KEYS,
    ) -> None:
        if max_rows < 1 or max_columns < 1 or max_cell_bytes < len('"…"'.encode()):
            raise ValueError("max_rows and max_columns must be >= 1, max_cell_bytes >= 5")
        self.max_bytes = check_max_bytes(max_bytes)
        self.max_rows = max_rows
        self.max_columns = max_columns
        self.max_cell_bytes = max_cell_bytes
        self.corpus = label(corpus)
        self.scope_keys = tuple(scope_keys)

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        columns, rows, more_rows = _read_result_set(raw)
        scope = build_scope(self.corpus, request, self.scope_keys)
        summary: dict[str, Any] = {
            "columns": [label(name) for name in columns[: self.max_columns]],
            "row_count": len(rows),
        }
        if len(columns) > self.max_columns:
            summary["omitted_columns"] = len(columns) - self.max_columns
        if more_rows:
            summary["more_rows"] = True
        candidates = [self._row(row) for row in rows[: self.max_rows]]

        def render(shown: Sequence[_Row]) -> dict[str, Any]:
            result = {
                **summary,
                "rows": [row.cells for row in shown],
                "omitted": len(rows) - len(shown),
            }
            cut = sum(row.cut for row in shown)
            if cut:
                result["truncated_cells"] = cut
            return result

        # Rows are not cut further: a row with fewer cells would misalign with the columns.
        found = bool(rows) or more_rows
        return bounded_projection(candidates, render, scope, self.max_bytes, found=found)

    def _row(self, row: list[Any]) -> _Row:
        cells, cut = [], 0
        for value in row[: self.max_columns]:
            cell, was_cut = bounded_value(value, self.max_cell_bytes)
            cells.append(cell)
            cut += was_cut
        return _Row(cells, cut)


def _read_result_set(raw: Any) -> tuple[list[Any], list[list[Any]], bool]:
    if not isinstance(raw, Mapping):
        raise MalformedRawError("columns")
    columns, rows, more_rows = raw.get("columns"), raw.get("rows"), raw.get("more_rows", False)
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise MalformedRawError("columns")
    if not isinstance(rows, list):
        raise MalformedRawError("rows")
    for i, row in enumerate(rows):
        # A row that does not match the columns would show values under the wrong names.
        if not isinstance(row, list) or len(row) != len(columns):
            raise MalformedRawError(f"rows[{i}]")
    if not isinstance(more_rows, bool):
        raise MalformedRawError("more_rows")
    return columns, rows, more_rows
