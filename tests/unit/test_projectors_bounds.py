"""The byte bound holds for any raw input: property tests over all three projectors.

Each projection is measured the way ``boundary.steps`` measures it before sealing READY:
UTF-8 bytes of canonical JSON of the result plus those of the scope. A projection over its
bound would make the call ERROR/RESULT_TOO_LARGE, so a projector must never produce one.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundary import EvidenceStatus, Projection, canonical_json, utf8_size
from projectors._fit import MIN_MAX_BYTES
from projectors.logs import LogSearchProjector
from projectors.rag import DocumentSearchProjector
from projectors.sql import SqlRowsProjector

PROPERTY_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Characters that cost more than one byte, in UTF-8 or as JSON escapes.
AWKWARD = '"\\\x00\x1f\n\té€日🙂\u2028 a'
#: Long texts are built by repetition: drawing thousands of characters one by one is slow.
long_texts = st.builds(
    lambda unit, times: unit * times,
    st.text(alphabet=AWKWARD, min_size=1, max_size=12) | st.text(min_size=1, max_size=12),
    st.integers(min_value=20, max_value=600),
)
texts = st.one_of(st.text(max_size=30), st.text(alphabet=AWKWARD, max_size=60), long_texts)
bounds = st.integers(min_value=MIN_MAX_BYTES, max_value=9000)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
requests = st.dictionaries(
    st.sampled_from(["query", "sql", "table", "level", "service", "other"]), json_values
)
optional_texts = st.none() | texts


def agent_bytes(projection: Projection) -> int:
    return utf8_size(canonical_json(projection.result)) + utf8_size(
        canonical_json(projection.scope)
    )


hits = st.fixed_dictionaries(
    {
        "doc_id": texts,
        "score": st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
        "text": texts,
    },
    optional={"title": optional_texts, "section": optional_texts},
)


@PROPERTY_SETTINGS
@given(
    raw=st.fixed_dictionaries({"hits": st.lists(hits, max_size=25)}),
    request=requests,
    max_bytes=bounds,
    top_k=st.integers(min_value=1, max_value=25),
    min_score=st.floats(min_value=-10, max_value=10),
)
def test_document_search_projection_never_exceeds_its_bound(
    raw: dict[str, Any], request: dict[str, Any], max_bytes: int, top_k: int, min_score: float
) -> None:
    projector = DocumentSearchProjector(max_bytes=max_bytes, top_k=top_k, min_score=min_score)

    projection = projector.project(raw, request)

    assert agent_bytes(projection) <= max_bytes
    passing = sum(1 for h in raw["hits"] if h["score"] >= min_score)
    found = projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
    assert found == (passing > 0)
    assert projection.result["total"] == passing
    assert len(projection.result["hits"]) + projection.result["omitted"] == passing


log_lines = st.fixed_dictionaries(
    {"message": texts},
    optional={"ts": optional_texts, "level": optional_texts, "service": optional_texts},
)


@PROPERTY_SETTINGS
@given(
    raw=st.fixed_dictionaries({"lines": st.lists(log_lines, max_size=60)}),
    request=requests,
    max_bytes=bounds,
    max_lines=st.integers(min_value=1, max_value=60),
)
def test_log_search_projection_never_exceeds_its_bound(
    raw: dict[str, Any], request: dict[str, Any], max_bytes: int, max_lines: int
) -> None:
    projector = LogSearchProjector(max_bytes=max_bytes, max_lines=max_lines)

    projection = projector.project(raw, request)

    assert agent_bytes(projection) <= max_bytes
    found = projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
    assert found == bool(raw["lines"])
    assert projection.result["matches"] == len(raw["lines"])
    assert sum(projection.result["by_level"].values()) == len(raw["lines"])
    assert len(projection.result["lines"]) + projection.result["omitted"] == len(raw["lines"])


#: Mostly scalars, as SQLite gives; some nested values, as other SQL tools may.
cells = st.one_of(scalars, st.lists(scalars, max_size=4), json_values)


@st.composite
def result_sets(draw: st.DrawFn) -> dict[str, Any]:
    columns = draw(st.lists(texts, max_size=12))
    width = len(columns)
    rows = draw(st.lists(st.lists(cells, min_size=width, max_size=width), max_size=30))
    return {"columns": columns, "rows": rows, "more_rows": draw(st.booleans())}


@PROPERTY_SETTINGS
@given(
    raw=result_sets(),
    request=requests,
    max_bytes=bounds,
    max_rows=st.integers(min_value=1, max_value=80),
)
def test_sql_rows_projection_never_exceeds_its_bound(
    raw: dict[str, Any], request: dict[str, Any], max_bytes: int, max_rows: int
) -> None:
    projector = SqlRowsProjector(max_bytes=max_bytes, max_rows=max_rows)

    projection = projector.project(raw, request)

    assert agent_bytes(projection) <= max_bytes
    found = projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
    assert found == (bool(raw["rows"]) or raw["more_rows"])
    assert projection.result["row_count"] == len(raw["rows"])
    assert len(projection.result["rows"]) + projection.result["omitted"] == len(raw["rows"])


#: A value larger than every cap, full of characters that cost several bytes each.
HUGE = '🙂"\\\x00' * 2000
WORST_REQUEST = dict.fromkeys(("query", "sql", "table", "level", "service"), HUGE)


def test_the_fixed_part_of_each_projection_fits_the_minimum_bound_in_the_worst_case() -> None:
    # Given raw data whose every label, count key and scope value is as large as can be
    doc_raw = {
        "hits": [{"doc_id": HUGE, "title": HUGE, "section": HUGE, "score": 1e300, "text": HUGE}]
        * 30
    }
    log_raw = {
        "lines": [
            {"ts": f"{i}{HUGE}", "level": f"{i}{HUGE}", "service": f"{i}{HUGE}", "message": HUGE}
            for i in range(30)
        ]
    }
    sql_raw = {
        "columns": [f"{i}{HUGE}" for i in range(40)],
        "rows": [[HUGE] * 40] * 30,
        "more_rows": True,
    }

    # When each is projected at the smallest bound a projector accepts
    projections = [
        DocumentSearchProjector(max_bytes=MIN_MAX_BYTES).project(doc_raw, WORST_REQUEST),
        LogSearchProjector(max_bytes=MIN_MAX_BYTES).project(log_raw, WORST_REQUEST),
        SqlRowsProjector(max_bytes=MIN_MAX_BYTES).project(sql_raw, WORST_REQUEST),
    ]

    # Then each fits: no configuration accepted at construction fails at projection time
    for projection in projections:
        assert projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
        assert agent_bytes(projection) <= MIN_MAX_BYTES
        assert projection.scope["truncated"] is True
