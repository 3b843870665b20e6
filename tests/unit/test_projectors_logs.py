"""LogSearchProjector: counts, time range and first lines within the byte bound."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from boundary import EvidenceStatus, Projection, canonical_json, utf8_size
from projectors._fit import MalformedRawError
from projectors.logs import OTHER_KEY, UNKNOWN_KEY, LogSearchProjector

REQUEST = {"query": "timeout", "service": "api"}


def agent_bytes(projection: Projection) -> int:
    """What the boundary measures: result plus scope, UTF-8 bytes of canonical JSON."""
    return utf8_size(canonical_json(projection.result)) + utf8_size(
        canonical_json(projection.scope)
    )


def line(
    message: str = "upstream timeout after 5000ms",
    ts: str = "2025-03-14T10:41:07.412Z",
    level: str = "ERROR",
    service: str = "api",
) -> dict[str, Any]:
    return {"ts": ts, "level": level, "service": service, "message": message}


def exact_fit(filler: str, count: int = 2000) -> tuple[int, LogSearchProjector, dict]:
    """A bound, a projector and a raw response whose full projection is exactly the bound."""
    roomy = LogSearchProjector(max_bytes=100_000, max_message_bytes=100_000)
    raw = {"lines": [line("first"), line("")]}
    max_bytes = agent_bytes(roomy.project(raw, REQUEST)) + utf8_size(filler) * count
    raw["lines"][1]["message"] = filler * count
    projector = LogSearchProjector(max_bytes=max_bytes, max_message_bytes=max_bytes)
    return max_bytes, projector, raw


class TestBounds:
    def test_a_projection_exactly_at_the_limit_is_returned_whole(self) -> None:
        max_bytes, projector, raw = exact_fit("x")

        projection = projector.project(raw, REQUEST)

        assert agent_bytes(projection) == max_bytes
        assert projection.result["lines"] == raw["lines"]
        assert projection.result["omitted"] == 0

    def test_one_byte_over_the_limit_cuts_the_last_message_and_marks_it(self) -> None:
        max_bytes, projector, raw = exact_fit("x")
        raw["lines"][1]["message"] += "x"

        projection = projector.project(raw, REQUEST)

        last = projection.result["lines"][1]
        assert last["truncated"] is True
        assert raw["lines"][1]["message"].startswith(last["message"])
        assert agent_bytes(projection) <= max_bytes
        assert projection.result["omitted"] == 0

    @pytest.mark.parametrize("filler", ["ß", "日", "🙂"], ids=["2-byte", "3-byte", "4-byte"])
    def test_non_ascii_messages_are_measured_in_utf8_bytes(self, filler: str) -> None:
        max_bytes, projector, raw = exact_fit(filler, count=1000)
        at_limit = projector.project(raw, REQUEST)
        raw["lines"][1]["message"] += filler
        over = projector.project(raw, REQUEST)

        assert agent_bytes(at_limit) == max_bytes
        assert "truncated" not in at_limit.result["lines"][1]
        assert over.result["lines"][1]["truncated"] is True
        assert set(over.result["lines"][1]["message"]) <= {filler}
        assert agent_bytes(over) <= max_bytes

    def test_lines_that_do_not_fit_are_counted_as_omitted(self) -> None:
        raw = {"lines": [line("m" * 300) for _ in range(40)]}

        projection = LogSearchProjector(max_bytes=4000, max_lines=40).project(raw, REQUEST)

        shown = len(projection.result["lines"])
        assert 0 < shown < 40
        assert projection.result["omitted"] == 40 - shown
        assert projection.result["matches"] == 40
        assert agent_bytes(projection) <= 4000

    def test_an_empty_raw_response_is_no_evidence_scoped_by_the_search(self) -> None:
        projection = LogSearchProjector().project({"query": "x", "lines": []}, REQUEST)

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.result == {
            "matches": 0,
            "by_level": {},
            "by_service": {},
            "first_ts": None,
            "last_ts": None,
            "lines": [],
            "omitted": 0,
        }
        assert projection.scope == {"corpus": "logs", "query": "timeout", "service": "api"}

    def test_hundreds_of_distinct_levels_are_summed_beyond_a_few(self) -> None:
        raw = {"lines": [line(level=f"LEVEL-{i}-" + "é" * 100) for i in range(300)]}

        projection = LogSearchProjector(max_bytes=2048).project(raw, REQUEST)

        by_level = projection.result["by_level"]
        assert len(by_level) == 8
        assert by_level[OTHER_KEY] == 293
        assert sum(by_level.values()) == 300
        assert agent_bytes(projection) <= 2048


class TestSummary:
    def test_counts_and_time_range_cover_every_match_not_only_the_shown_lines(self) -> None:
        raw = {
            "lines": [
                line(ts="2025-03-14T10:40:00.000Z", level="WARN", service="db"),
                line(ts="2025-03-14T10:41:00.000Z"),
                line(ts="2025-03-14T10:39:00.000Z"),
                line(ts="2025-03-14T10:42:00.000Z", service="cache"),
            ]
        }

        projection = LogSearchProjector(max_lines=1).project(raw, REQUEST)

        result = projection.result
        assert projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
        assert result["matches"] == 4
        assert result["by_level"] == {"ERROR": 3, "WARN": 1}
        assert result["by_service"] == {"api": 2, "cache": 1, "db": 1}
        assert result["first_ts"] == "2025-03-14T10:39:00.000Z"
        assert result["last_ts"] == "2025-03-14T10:42:00.000Z"
        assert result["lines"] == [raw["lines"][0]]
        assert result["omitted"] == 3

    def test_lines_without_level_service_or_time_are_counted_as_unknown(self) -> None:
        raw = {"lines": [{"message": "bare"}, {"message": "null", "level": None}]}

        result = LogSearchProjector().project(raw, REQUEST).result

        assert result["by_level"] == {UNKNOWN_KEY: 2}
        assert result["first_ts"] is None
        assert result["lines"] == [{"message": "bare"}, {"message": "null"}]

    def test_a_long_message_is_cut_to_its_cap_and_marked(self) -> None:
        raw = {"lines": [line("x" * 5000)]}

        shown = LogSearchProjector(max_message_bytes=100).project(raw, REQUEST).result["lines"]

        assert shown[0]["truncated"] is True
        assert utf8_size(canonical_json(shown[0]["message"])) <= 100

    def test_projection_is_pure_and_deterministic(self) -> None:
        raw = {"lines": [line(f"message {i}", level=("INFO", "WARN")[i % 2]) for i in range(60)]}
        before = copy.deepcopy(raw)
        projector = LogSearchProjector()

        assert projector.project(raw, REQUEST) == projector.project(raw, REQUEST)
        assert raw == before


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"pattern": "x"},
        {"lines": {}},
        {"lines": ["a line"]},
        {"lines": [{"ts": "t"}]},
        {"lines": [{"message": 3}]},
        {"lines": [{"message": "m", "level": 3}]},
    ],
)
def test_a_raw_response_of_the_wrong_shape_fails_the_projection(raw: Any) -> None:
    with pytest.raises(MalformedRawError):
        LogSearchProjector().project(raw, REQUEST)
