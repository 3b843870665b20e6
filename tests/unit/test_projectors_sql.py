"""SqlRowsProjector: columns, first rows and the row count within the byte bound."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from boundary import EvidenceStatus, Projection, canonical_json, utf8_size
from projectors._fit import MalformedRawError
from projectors.sql import SqlRowsProjector

REQUEST = {"sql": "SELECT id, title FROM incidents"}


def agent_bytes(projection: Projection) -> int:
    """What the boundary measures: result plus scope, UTF-8 bytes of canonical JSON."""
    return utf8_size(canonical_json(projection.result)) + utf8_size(
        canonical_json(projection.scope)
    )


def exact_fit(filler: str, count: int = 2000) -> tuple[int, SqlRowsProjector, dict]:
    """A bound, a projector and a raw result set whose full projection is exactly the bound."""
    roomy = SqlRowsProjector(max_bytes=100_000, max_cell_bytes=100_000)
    raw = {"columns": ["id", "title"], "rows": [[1, "lead"], [2, ""]]}
    max_bytes = agent_bytes(roomy.project(raw, REQUEST)) + utf8_size(filler) * count
    raw["rows"][1][1] = filler * count
    return max_bytes, SqlRowsProjector(max_bytes=max_bytes, max_cell_bytes=max_bytes), raw


class TestBounds:
    @pytest.mark.parametrize("filler", ["a", "é", "日", "🙂"])
    def test_a_projection_exactly_at_the_limit_is_returned_whole(self, filler: str) -> None:
        max_bytes, projector, raw = exact_fit(filler, count=2000)

        projection = projector.project(raw, REQUEST)

        assert agent_bytes(projection) == max_bytes
        assert projection.result["rows"] == raw["rows"]
        assert projection.result["omitted"] == 0
        assert "truncated_cells" not in projection.result

    @pytest.mark.parametrize("filler", ["a", "é", "日", "🙂"])
    def test_one_byte_over_the_limit_drops_the_last_row_and_counts_it(self, filler: str) -> None:
        # Rows are never cut short: a partial row would misalign with the columns.
        max_bytes, projector, raw = exact_fit(filler, count=2000)
        raw["rows"][1][1] += filler

        projection = projector.project(raw, REQUEST)

        assert projection.result["rows"] == [[1, "lead"]]
        assert projection.result["omitted"] == 1
        assert projection.result["row_count"] == 2
        assert agent_bytes(projection) <= max_bytes

    def test_a_long_cell_is_cut_on_a_character_and_marked(self) -> None:
        raw = {"columns": ["title"], "rows": [["日" * 40], ["short"]]}

        projection = SqlRowsProjector(max_cell_bytes=50).project(raw, REQUEST)

        cell = projection.result["rows"][0][0]
        assert cell.endswith("…")
        assert set(cell[:-1]) == {"日"}
        assert utf8_size(canonical_json(cell)) <= 50
        assert projection.result["truncated_cells"] == 1
        assert projection.result["rows"][1] == ["short"]

    def test_a_large_nested_cell_becomes_its_cut_json_text(self) -> None:
        raw = {"columns": ["doc"], "rows": [[{"k": ["v"] * 200}]]}

        cell = SqlRowsProjector(max_cell_bytes=40).project(raw, REQUEST).result["rows"][0][0]

        assert cell.startswith('{"k":["v"')
        assert utf8_size(canonical_json(cell)) <= 40

    def test_a_wide_result_set_shows_the_first_columns_and_counts_the_rest(self) -> None:
        columns = [f"column_{i}" for i in range(40)]
        raw = {"columns": columns, "rows": [list(range(40))]}

        result = SqlRowsProjector(max_columns=16).project(raw, REQUEST).result

        assert result["columns"] == columns[:16]
        assert result["rows"] == [list(range(16))]
        assert result["omitted_columns"] == 24

    def test_zero_rows_are_no_evidence_scoped_by_the_statement(self) -> None:
        raw = {"columns": ["id", "title"], "rows": []}

        projection = SqlRowsProjector(corpus="orbit.db").project(raw, REQUEST)

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.result == {
            "columns": ["id", "title"],
            "rows": [],
            "row_count": 0,
            "omitted": 0,
        }
        assert projection.scope == {"corpus": "orbit.db", "sql": REQUEST["sql"]}

    def test_an_empty_raw_response_without_columns_is_no_evidence(self) -> None:
        projection = SqlRowsProjector().project({"columns": [], "rows": []}, {})

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.scope == {"corpus": "sql"}


class TestRows:
    def test_first_rows_and_total_count_are_shown(self) -> None:
        raw = {"columns": ["n"], "rows": [[i] for i in range(120)]}

        projection = SqlRowsProjector(max_rows=50).project(raw, REQUEST)

        assert projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
        assert projection.result["rows"] == [[i] for i in range(50)]
        assert projection.result["row_count"] == 120
        assert projection.result["omitted"] == 70

    def test_a_tool_side_row_cap_is_passed_on(self) -> None:
        raw = {"columns": ["n"], "rows": [[1]], "more_rows": True}

        result = SqlRowsProjector().project(raw, REQUEST).result

        assert result["more_rows"] is True

    def test_projection_is_pure_and_deterministic(self) -> None:
        raw = {"columns": ["a", "b"], "rows": [[i, "v" * 400] for i in range(30)]}
        before = copy.deepcopy(raw)
        projector = SqlRowsProjector()

        assert projector.project(raw, REQUEST) == projector.project(raw, REQUEST)
        assert raw == before


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"rows": []},
        {"columns": "a,b", "rows": []},
        {"columns": [1], "rows": []},
        {"columns": ["a"], "rows": {}},
        {"columns": ["a"], "rows": [[1, 2]]},
        {"columns": ["a"], "rows": [{"a": 1}]},
        {"columns": ["a"], "rows": [], "more_rows": "yes"},
    ],
)
def test_a_raw_response_of_the_wrong_shape_fails_the_projection(raw: Any) -> None:
    with pytest.raises(MalformedRawError):
        SqlRowsProjector().project(raw, REQUEST)
