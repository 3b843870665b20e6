"""Projector for document search (RAG) tools: ranked hits become a few bounded snippets.

Raw response read (any tool of this kind)::

    {"query": "...", "hits": [{"doc_id": "...", "score": 1.5, "text": "...",
                               "title": "...", "section": "..."}, ...]}

``title`` and ``section`` are optional. Hits need not be sorted: the projector ranks them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

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

#: Snippets shown at most; more passing hits are counted in ``omitted``.
DEFAULT_TOP_K = 5
#: Hits scoring below this are not evidence. Suits BM25 scores over a small corpus; a tool
#: with another scale passes its own.
DEFAULT_MIN_SCORE = 1.0
#: Cap on one snippet's JSON bytes, so one long passage cannot crowd out the others.
DEFAULT_MAX_SNIPPET_BYTES = 1200
#: A snippet cut shorter than this is not worth showing: the hit is counted as omitted.
MIN_SNIPPET_BYTES = 64
#: Context kept before the first query term when a long text must be cut.
SNIPPET_LEAD_CHARS = 80
#: A cut snippet ends at a blank when one is this close to the end.
WORD_BACKOFF_CHARS = 24
#: Cap on an id's, a title's or a section's JSON bytes.
MAX_SOURCE_BYTES = 128
#: Query terms used to place a snippet: shorter ones (articles) place it badly.
MIN_TERM_CHARS = 3
MAX_TERMS = 16

_WORD = re.compile(r"\w+")


class _Hit(NamedTuple):
    doc_id: str
    score: float
    text: str
    title: str | None
    section: str | None


class DocumentSearchProjector:
    """Shows the top-k hits at or above ``min_score`` as snippets within ``max_bytes``.

    NO_EVIDENCE when no hit reaches ``min_score``: the scope (corpus, query, threshold) says
    what was searched, so the negative answer is a claim about exactly that.

    Args:
        max_bytes: bound on UTF-8 bytes of canonical JSON of result plus scope.
        top_k: snippets shown at most.
        min_score: the evidence threshold.
        max_snippet_bytes: cap on one snippet.
        corpus: names what was searched, in the scope.
        query_key: the request argument holding the query.
    """

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        top_k: int = DEFAULT_TOP_K,
        min_score: float = DEFAULT_MIN_SCORE,
        max_snippet_bytes: int = DEFAULT_MAX_SNIPPET_BYTES,
        corpus: str = "docs",
        query_key: str = "query",
    ) -> None:
        if top_k < 1 or max_snippet_bytes < MIN_SNIPPET_BYTES:
            raise ValueError("top_k must be >= 1 and max_snippet_bytes >= MIN_SNIPPET_BYTES")
        self.max_bytes = check_max_bytes(max_bytes)
        self.top_k = top_k
        self.min_score = min_score
        self.max_snippet_bytes = max_snippet_bytes
        self.corpus = label(corpus)
        self.query_key = query_key

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        hits = _read_hits(raw)
        passing = sorted((h for h in hits if h.score >= self.min_score), key=lambda h: -h.score)
        scope = build_scope(self.corpus, request, (self.query_key,))
        scope["min_score"] = self.min_score
        query = request.get(self.query_key) if isinstance(request, Mapping) else None
        terms = _term_pattern(query)
        candidates = [self._item(hit, terms) for hit in passing[: self.top_k]]
        below = len(hits) - len(passing)

        def render(shown: Sequence[dict[str, Any]]) -> dict[str, Any]:
            return {
                "hits": list(shown),
                "total": len(passing),
                "omitted": len(passing) - len(shown),
                "below_min_score": below,
            }

        return bounded_projection(
            candidates, render, scope, self.max_bytes, found=bool(passing), shrink=_shrink
        )

    def _item(self, hit: _Hit, terms: re.Pattern[str] | None) -> dict[str, Any]:
        text, cut = make_snippet(hit.text, terms, self.max_snippet_bytes)
        item: dict[str, Any] = {
            "doc_id": label(hit.doc_id, MAX_SOURCE_BYTES),
            "score": round(hit.score, 4),
            "snippet": text,
        }
        if hit.title is not None:
            item["title"] = label(hit.title, MAX_SOURCE_BYTES)
        if hit.section is not None:
            item["section"] = label(hit.section, MAX_SOURCE_BYTES)
        if cut:
            item["truncated"] = True
        return item


def make_snippet(text: str, terms: re.Pattern[str] | None, max_json_bytes: int) -> tuple[str, bool]:
    """``text`` itself when it fits, else a cut starting shortly before the first query term.

    Returns:
        The snippet, and whether it is not the whole text.
    """
    whole, cut = shorten(text, max_json_bytes)
    if not cut:
        return whole, False
    start = 0
    match = terms.search(text) if terms is not None else None
    if match is not None and match.start() > SNIPPET_LEAD_CHARS:
        # Start at a word: after the last blank before the lead-in.
        start = text.rfind(" ", 0, match.start() - SNIPPET_LEAD_CHARS) + 1
    if start == 0:
        return _at_word_end(whole), True
    snippet, tail_cut = shorten(text[start:], max_json_bytes)
    return (_at_word_end(snippet) if tail_cut else snippet), True


def _at_word_end(snippet: str) -> str:
    blank = snippet.rfind(" ", max(len(snippet) - WORD_BACKOFF_CHARS, 1))
    return snippet[:blank] if blank > 0 else snippet


def _shrink(item: dict[str, Any], max_json_bytes: int) -> dict[str, Any] | None:
    """The hit with its snippet cut to fit, or ``None`` when too little text would be left."""
    return shrink_text(
        item, max_json_bytes, field="snippet", min_bytes=MIN_SNIPPET_BYTES, finish=_at_word_end
    )


def _term_pattern(query: Any) -> re.Pattern[str] | None:
    if not isinstance(query, str):
        return None
    terms = [t for t in _WORD.findall(query[:1000]) if len(t) >= MIN_TERM_CHARS][:MAX_TERMS]
    if not terms:
        return None
    # Escaped literals joined by "|": no user-controlled regex syntax, no backtracking blow-up.
    return re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE)


def _read_hits(raw: Any) -> list[_Hit]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("hits"), list):
        raise MalformedRawError("hits")
    return [_read_hit(hit, f"hits[{i}]") for i, hit in enumerate(raw["hits"])]


def _read_hit(hit: Any, where: str) -> _Hit:
    if not isinstance(hit, Mapping):
        raise MalformedRawError(where)
    doc_id, score, text = hit.get("doc_id"), hit.get("score"), hit.get("text")
    title, section = hit.get("title"), hit.get("section")
    if not isinstance(doc_id, str):
        raise MalformedRawError(f"{where}.doc_id")
    score = _finite_float(score)
    if score is None:
        raise MalformedRawError(f"{where}.score")
    if not isinstance(text, str):
        raise MalformedRawError(f"{where}.text")
    if not (title is None or isinstance(title, str)):
        raise MalformedRawError(f"{where}.title")
    if not (section is None or isinstance(section, str)):
        raise MalformedRawError(f"{where}.section")
    return _Hit(doc_id, score, text, title, section)


def _finite_float(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` (a bool, a string, NaN, or an int too big)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
