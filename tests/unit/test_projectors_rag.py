"""DocumentSearchProjector: top-k snippets within the byte bound, NO_EVIDENCE below threshold."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from boundary import EvidenceStatus, Projection, canonical_json, utf8_size
from projectors._fit import MIN_MAX_BYTES, MalformedRawError
from projectors.rag import DocumentSearchProjector

QUERY = {"query": "upstream timeout"}


def agent_bytes(projection: Projection) -> int:
    """What the boundary measures: result plus scope, UTF-8 bytes of canonical JSON."""
    return utf8_size(canonical_json(projection.result)) + utf8_size(
        canonical_json(projection.scope)
    )


def hit(doc_id: str, score: float, text: str = "some text", **extra: Any) -> dict[str, Any]:
    return {"doc_id": doc_id, "score": score, "text": text, **extra}


def exact_fit(filler: str, count: int = 2000) -> tuple[int, DocumentSearchProjector, dict]:
    """A bound, a projector and a raw response whose full projection is exactly the bound.

    The last hit's text is ``filler`` * ``count``; the bound is the projection of an empty
    text plus the filler's UTF-8 bytes.
    """
    roomy = DocumentSearchProjector(max_bytes=100_000, max_snippet_bytes=100_000)
    raw = {"hits": [hit("first", 3.0, "ASCII lead"), hit("last", 2.0, "")]}
    max_bytes = agent_bytes(roomy.project(raw, QUERY)) + utf8_size(filler) * count
    raw["hits"][1]["text"] = filler * count
    projector = DocumentSearchProjector(max_bytes=max_bytes, max_snippet_bytes=max_bytes)
    return max_bytes, projector, raw


class TestBounds:
    def test_a_projection_exactly_at_the_limit_is_returned_whole(self) -> None:
        # Given a raw response whose full projection takes exactly max_bytes
        max_bytes, projector, raw = exact_fit("a")

        # When it is projected
        projection = projector.project(raw, QUERY)

        # Then nothing is cut or left out
        assert agent_bytes(projection) == max_bytes
        assert [h["snippet"] for h in projection.result["hits"]] == [
            "ASCII lead",
            raw["hits"][1]["text"],
        ]
        assert not any("truncated" in h for h in projection.result["hits"])
        assert projection.result["omitted"] == 0

    def test_one_byte_over_the_limit_cuts_the_last_snippet_and_marks_it(self) -> None:
        # Given the same response, one byte too big for the projector
        max_bytes, projector, raw = exact_fit("a")
        raw["hits"][1]["text"] += "a"

        # When it is projected
        projection = projector.project(raw, QUERY)

        # Then the last snippet is shortened and flagged, and the bound holds
        last = projection.result["hits"][1]
        assert last["truncated"] is True
        assert raw["hits"][1]["text"].startswith(last["snippet"])
        assert agent_bytes(projection) <= max_bytes
        assert projection.result["omitted"] == 0

    @pytest.mark.parametrize("filler", ["é", "€", "𝔸"], ids=["2-byte", "3-byte", "4-byte"])
    def test_non_ascii_text_is_measured_in_utf8_bytes_and_cut_on_a_character(
        self, filler: str
    ) -> None:
        # Given multi-byte text that fits exactly, and then by one character too many
        max_bytes, projector, raw = exact_fit(filler, count=1000)
        at_limit = projector.project(raw, QUERY)
        raw["hits"][1]["text"] += filler
        over = projector.project(raw, QUERY)

        # Then the exact fit is whole and the larger one is cut between characters
        assert agent_bytes(at_limit) == max_bytes
        assert "truncated" not in at_limit.result["hits"][1]
        snippet = over.result["hits"][1]["snippet"]
        assert over.result["hits"][1]["truncated"] is True
        assert set(snippet) <= {filler}
        assert agent_bytes(over) <= max_bytes

    def test_text_that_fits_in_characters_but_not_in_bytes_is_cut(self) -> None:
        # Given a snippet cap of 64 bytes and 40 three-byte characters (40 chars, 120 bytes)
        projector = DocumentSearchProjector(max_snippet_bytes=64)
        raw = {"hits": [hit("doc", 2.0, "€" * 40)]}

        # When it is projected
        snippet = projector.project(raw, QUERY).result["hits"][0]

        # Then the snippet is cut to whole characters within 64 bytes of JSON
        assert snippet["truncated"] is True
        assert snippet["snippet"] == "€" * 20
        assert utf8_size(canonical_json(snippet["snippet"])) <= 64

    def test_a_hit_too_big_to_cut_usefully_is_omitted_not_shown_empty(self) -> None:
        # Given a first hit that fills the bound, and a second with little room left
        max_bytes, projector, raw = exact_fit("a")
        raw["hits"][0]["text"] = "b" * (max_bytes - 100)

        # When it is projected
        projection = projector.project(raw, QUERY)

        # Then the second hit is counted as omitted rather than shown without text
        assert len(projection.result["hits"]) == 1
        assert projection.result["omitted"] == 1
        assert projection.result["total"] == 2
        assert agent_bytes(projection) <= max_bytes

    def test_an_empty_raw_response_is_no_evidence_scoped_by_the_query(self) -> None:
        projection = DocumentSearchProjector().project({"query": "x", "hits": []}, QUERY)

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.result == {"hits": [], "total": 0, "omitted": 0, "below_min_score": 0}
        assert projection.scope == {
            "corpus": "docs",
            "query": "upstream timeout",
            "min_score": 1.0,
        }

    def test_a_huge_query_is_cut_in_the_scope_and_flagged(self) -> None:
        projection = DocumentSearchProjector().project({"hits": []}, {"query": "ü" * 5000})

        assert projection.scope["truncated"] is True
        assert projection.scope["query"].endswith("…")
        assert agent_bytes(projection) <= 2000

    def test_a_bound_below_the_minimum_is_refused_at_construction(self) -> None:
        with pytest.raises(ValueError):
            DocumentSearchProjector(max_bytes=MIN_MAX_BYTES - 1)


class TestRanking:
    def test_hits_are_ranked_by_score_whatever_their_raw_order(self) -> None:
        raw = {"hits": [hit("b", 1.5), hit("a", 4.0), hit("c", 2.0), hit("d", 2.0)]}

        projection = DocumentSearchProjector().project(raw, QUERY)

        # Ties keep the raw order: the ranking is deterministic.
        assert [h["doc_id"] for h in projection.result["hits"]] == ["a", "c", "d", "b"]

    def test_only_top_k_are_shown_and_the_rest_counted(self) -> None:
        raw = {"hits": [hit(f"doc-{i}", 10.0 - i) for i in range(7)]}

        projection = DocumentSearchProjector(top_k=3).project(raw, QUERY)

        assert [h["doc_id"] for h in projection.result["hits"]] == ["doc-0", "doc-1", "doc-2"]
        assert projection.result["total"] == 7
        assert projection.result["omitted"] == 4

    def test_hits_below_the_threshold_are_no_evidence(self) -> None:
        raw = {"hits": [hit("weak", 0.9), hit("weaker", 0.2)]}

        projection = DocumentSearchProjector(min_score=1.0).project(raw, QUERY)

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.result["hits"] == []
        assert projection.result["below_min_score"] == 2
        assert projection.scope["min_score"] == 1.0

    def test_a_hit_at_the_threshold_is_evidence_with_its_source(self) -> None:
        raw = {
            "hits": [
                hit("timeouts#diagnosis", 1.0, "Check the db log.", title="T", section="D"),
                hit("other", 0.5),
            ]
        }

        projection = DocumentSearchProjector(min_score=1.0).project(raw, QUERY)

        assert projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
        assert projection.result["hits"] == [
            {
                "doc_id": "timeouts#diagnosis",
                "title": "T",
                "section": "D",
                "score": 1.0,
                "snippet": "Check the db log.",
            }
        ]
        assert projection.result["below_min_score"] == 1

    def test_a_long_text_is_cut_around_the_first_query_term(self) -> None:
        text = "filler words here " * 100 + "an upstream timeout happened " + "tail " * 100
        raw = {"hits": [hit("doc", 2.0, text)]}

        snippet = DocumentSearchProjector(max_snippet_bytes=300).project(raw, QUERY)
        shown = snippet.result["hits"][0]

        assert shown["truncated"] is True
        assert "upstream timeout" in shown["snippet"]
        assert shown["snippet"] in text

    def test_projection_is_pure_and_deterministic(self) -> None:
        raw = {"hits": [hit(f"d{i}", float(i), "word " * 300) for i in range(8)]}
        before = copy.deepcopy(raw)
        projector = DocumentSearchProjector(max_bytes=MIN_MAX_BYTES)

        first = projector.project(raw, QUERY)
        second = projector.project(raw, QUERY)

        assert first == second
        assert raw == before


class TestMalformedRaw:
    @pytest.mark.parametrize(
        "raw",
        [
            None,
            [],
            {"query": "x"},
            {"hits": "nope"},
            {"hits": [None]},
            {"hits": [{"doc_id": 1, "score": 1.0, "text": ""}]},
            {"hits": [{"doc_id": "a", "score": "high", "text": ""}]},
            {"hits": [{"doc_id": "a", "score": True, "text": ""}]},
            {"hits": [{"doc_id": "a", "score": 10**400, "text": ""}]},
            {"hits": [{"doc_id": "a", "score": 1.0, "text": None}]},
            {"hits": [{"doc_id": "a", "score": 1.0, "text": "", "title": 3}]},
        ],
    )
    def test_a_raw_response_of_the_wrong_shape_fails_the_projection(self, raw: Any) -> None:
        # Garbage must become PROJECTION_FAILED, never a quiet NO_EVIDENCE.
        with pytest.raises(MalformedRawError):
            DocumentSearchProjector().project(raw, QUERY)
