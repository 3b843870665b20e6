"""BM25 ranking over Markdown documents, one passage per ``##`` section.

Small on purpose: a real deployment would call a search service; the projector does not
care, it only reads ranked hits.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

#: BM25 term-frequency saturation and length normalisation (the usual values).
K1 = 1.2
B = 0.75

_WORD = re.compile(r"\w+")
#: Words too common to rank by.
_STOPWORD_TEXT = """
a an and are as at be by do for from how i in is it its of on or the this to what when where
which who why with
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def tokens(text: str) -> list[str]:
    """Lower-cased words without stop words, with a plural ``s`` dropped (timeouts ->
    timeout), so query and documents meet on the same forms."""
    words = (w.lower() for w in _WORD.findall(text))
    return [_stem(w) for w in words if w not in _STOPWORDS]


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


@dataclass(frozen=True)
class Passage:
    """One section of one document: what a hit points at."""

    doc_id: str
    title: str
    section: str | None
    text: str

    @cached_property
    def terms(self) -> Counter[str]:
        return Counter(tokens(" ".join(filter(None, (self.title, self.section, self.text)))))

    @cached_property
    def length(self) -> int:
        return sum(self.terms.values())


def _slug(heading: str) -> str:
    return "-".join(_WORD.findall(heading.lower()))


def split_markdown(stem: str, markdown: str) -> list[Passage]:
    """The document's passages: the text before the first ``##`` heading, then each section.

    Ids are ``<file stem>#<heading slug>`` (the stem alone for the lead text), so a hit
    names the exact passage it quotes.
    """
    title = stem
    section: str | None = None
    body: list[str] = []
    passages: list[Passage] = []

    def close() -> None:
        text = "\n".join(body).strip()
        if text:
            doc_id = f"{stem}#{_slug(section)}" if section else stem
            passages.append(Passage(doc_id, title, section, text))
        body.clear()

    for line in markdown.splitlines():
        if line.startswith("# "):
            title = line[2:].strip()
        elif line.startswith("## "):
            close()
            section = line[3:].strip()
        else:
            body.append(line)
    close()
    return passages


class DocumentIndex:
    """An in-memory BM25 index over the passages of a directory of ``*.md`` files."""

    def __init__(self, passages: Iterable[Passage]) -> None:
        self.passages = list(passages)
        self.document_frequency: Counter[str] = Counter()
        for passage in self.passages:
            self.document_frequency.update(passage.terms.keys())
        lengths = [p.length for p in self.passages]
        self.average_length = sum(lengths) / len(lengths) if lengths else 0.0

    @classmethod
    def from_directory(cls, directory: Path) -> DocumentIndex:
        # Sorted: the same files always give the same index and the same tie order.
        return cls(
            passage
            for path in sorted(directory.glob("*.md"))
            for passage in split_markdown(path.stem, path.read_text(encoding="utf-8"))
        )

    def idf(self, term: str) -> float:
        n, df = len(self.passages), self.document_frequency[term]
        return math.log((n - df + 0.5) / (df + 0.5) + 1.0)

    def score(self, passage: Passage, query_terms: Iterable[str]) -> float:
        norm = K1 * (1 - B + B * passage.length / (self.average_length or 1.0))
        total = 0.0
        for term in set(query_terms):
            tf = passage.terms[term]
            if tf:
                total += self.idf(term) * tf * (K1 + 1) / (tf + norm)
        return total

    def search(self, query: str, limit: int) -> list[dict[str, Any]]:
        """Hits with a positive score, best first (ties by id), at most ``limit``."""
        query_terms = tokens(query)
        scored = [(round(self.score(p, query_terms), 4), p) for p in self.passages]
        ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1].doc_id))
        return [
            {
                "doc_id": p.doc_id,
                "title": p.title,
                "section": p.section,
                "score": score,
                "text": p.text,
            }
            for score, p in ranked[:limit]
        ]
