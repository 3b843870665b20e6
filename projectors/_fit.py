"""Fitting a projection within a byte bound: the helpers every kind of projector shares.

Every size here is what the boundary measures: UTF-8 bytes of canonical JSON. Text is cut on
code point boundaries (a Python ``str`` slice), so a cut never splits a UTF-8 sequence, and a
cut is always visible to the agent, as a flag or a trailing mark, never silent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from boundary.errors import BoundaryError, ErrorCode
from boundary.limits import DEFAULT_MAX_AGENT_RESULT_BYTES, canonical_json, utf8_size
from boundary.models import EvidenceStatus, Projection

#: Default bound on result + scope: a little under the boundary's default agent limit, so a
#: projection fits even when an operator lowers that limit a bit.
DEFAULT_MAX_BYTES = DEFAULT_MAX_AGENT_RESULT_BYTES - 256
#: Smallest accepted bound. Scope values and counters are capped so that a projection's
#: fixed part (scope, counts, column names) always fits in this much, whatever the raw input.
MIN_MAX_BYTES = 2048
#: Cap on each scope value (a query, a SQL text): longer values are cut and marked.
MAX_SCOPE_VALUE_BYTES = 200
#: Cap on a short label (an id, a level, a column name) copied from raw data.
MAX_LABEL_BYTES = 48
#: Appended to a string value that was cut, where no separate flag can say so.
TRUNCATION_MARK = "…"

T = TypeVar("T")


class ProjectionError(BoundaryError, ValueError):
    """A projector could not build a projection; the call is sealed PROJECTION_FAILED."""

    code = ErrorCode.PROJECTION_FAILED


class MalformedRawError(ProjectionError):
    """The raw response does not have the shape this projector reads.

    Raised rather than guessed around: the boundary seals such a call ERROR/PROJECTION_FAILED,
    which is the truth, where a lenient reading could turn garbage into NO_EVIDENCE.

    Attributes:
        where: the part of the raw response that is wrong (e.g. ``"hits[3].score"``). The
            message stays the code: raw values never enter an exception.
    """

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where


class ProjectionTooLargeError(ProjectionError):
    """Even the fixed part of a projection does not fit its bound (a misconfiguration)."""


def json_size(value: Any) -> int:
    """UTF-8 bytes of ``value``'s canonical JSON: the boundary's one measure of size."""
    return utf8_size(canonical_json(value))


def check_max_bytes(max_bytes: int) -> int:
    """Validates a projector's bound at construction, where a mistake is cheap to see."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise TypeError("max_bytes must be an int")
    if max_bytes < MIN_MAX_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_MAX_BYTES}")
    return max_bytes


def clean_text(text: str) -> str:
    """``text`` with lone surrogates replaced, so it always encodes to UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def shorten(text: str, max_json_bytes: int, mark: str = "") -> tuple[str, bool]:
    """The longest prefix of ``text`` (plus ``mark`` when cut) whose JSON is within the bound.

    Returns:
        The text, and whether it was cut. The JSON string's quotes and escapes count, so the
        result always satisfies ``json_size(text) <= max_json_bytes`` (for a bound >= 2).
    """
    # Every character costs at least one byte, so a longer prefix can never fit.
    head = clean_text(text[:max_json_bytes])
    if len(head) == len(text) and json_size(head) <= max_json_bytes:
        return head, False
    if json_size(mark) > max_json_bytes:
        return "", True
    low, high = 0, len(head)
    while low < high:
        middle = (low + high + 1) // 2
        if json_size(head[:middle] + mark) <= max_json_bytes:
            low = middle
        else:
            high = middle - 1
    return head[:low] + mark, True


def label(value: Any, max_json_bytes: int = MAX_LABEL_BYTES) -> str:
    """A short display string from raw data, cut and marked when too long."""
    text = value if isinstance(value, str) else canonical_json(value)
    return shorten(text, max_json_bytes, TRUNCATION_MARK)[0]


def bounded_value(value: Any, max_json_bytes: int) -> tuple[Any, bool]:
    """``value`` itself when its JSON fits, else its (JSON) text cut and marked.

    Returns:
        The value to show, and whether it was cut.
    """
    if isinstance(value, str):
        return shorten(value, max_json_bytes, TRUNCATION_MARK)
    if json_size(value) <= max_json_bytes:
        return value, False
    return shorten(canonical_json(value), max_json_bytes, TRUNCATION_MARK)


def build_scope(
    corpus: str, request: Any, keys: Sequence[str], max_value_bytes: int = MAX_SCOPE_VALUE_BYTES
) -> dict[str, Any]:
    """What a call observed: the corpus searched and the request's values for ``keys``.

    The scope of a NO_EVIDENCE answer is the claim's extent ("nothing in *docs* for *this
    query*"), so it comes from the request, and a cut value is flagged ``truncated``.
    """
    scope: dict[str, Any] = {"corpus": corpus}
    cut = False
    arguments = request if isinstance(request, Mapping) else {}
    for key in keys:
        if key in arguments:
            scope[key], was_cut = bounded_value(arguments[key], max_value_bytes)
            cut = cut or was_cut
    if cut:
        scope["truncated"] = True
    return scope


def fit_items(
    items: Sequence[T],
    render: Callable[[Sequence[T]], dict[str, Any]],
    budget: int,
    shrink: Callable[[T, int], T | None] | None = None,
) -> dict[str, Any]:
    """The result holding the longest prefix of ``items`` that fits ``budget`` bytes.

    Args:
        items: candidates in the order they should be shown.
        render: builds the whole result from the items shown (and counts what it left out),
            so the bytes measured are exactly the bytes returned.
        budget: bytes the result may take (the projector's bound minus its scope).
        shrink: optionally cuts the first item that does not fit to at most the given number
            of bytes (its canonical JSON), or returns ``None`` when too little would be left.

    Raises:
        ProjectionTooLargeError: even the result without any item exceeds ``budget``.
    """
    items = list(items)

    def fits(count: int) -> bool:
        return json_size(render(items[:count])) <= budget

    if not fits(0):
        raise ProjectionTooLargeError()
    # Each item adds more bytes than its counters can save, so size grows with the count:
    # a binary search finds the largest count that fits with O(log n) measurements.
    low, high = 0, len(items)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    shown = items[:low]
    if shrink is not None and low < len(items):
        candidate = items[low]
        overhead = json_size(render([*shown, candidate])) - json_size(candidate)
        smaller = shrink(candidate, budget - overhead)
        if smaller is not None and json_size(render([*shown, smaller])) <= budget:
            shown = [*shown, smaller]
    return render(shown)


def shrink_text(
    item: dict[str, Any],
    max_json_bytes: int,
    *,
    field: str,
    min_bytes: int,
    finish: Callable[[str], str] | None = None,
) -> dict[str, Any] | None:
    """``item`` with its text ``field`` cut (then passed through ``finish``) so that the item
    fits ``max_json_bytes``, marked ``"truncated": true``; ``None`` when less than
    ``min_bytes`` would be left for the text. A ``shrink`` for ``fit_items``."""
    bare = {**item, field: "", "truncated": True}
    room = max_json_bytes - json_size(bare) + json_size("")
    if room < min_bytes:
        return None
    text, _ = shorten(item[field], room)
    return {**bare, field: finish(text) if finish is not None else text}


def bounded_projection(
    items: Sequence[T],
    render: Callable[[Sequence[T]], dict[str, Any]],
    scope: dict[str, Any],
    max_bytes: int,
    *,
    found: bool,
    shrink: Callable[[T, int], T | None] | None = None,
) -> Projection:
    """The projection showing the longest prefix of ``items`` that fits ``max_bytes`` beside
    ``scope`` (``fit_items``; ``ensure_within`` checks the whole), EVIDENCE_FOUND when
    ``found``, else NO_EVIDENCE."""
    result = fit_items(items, render, max_bytes - json_size(scope), shrink)
    ensure_within(result, scope, max_bytes)
    status = EvidenceStatus.EVIDENCE_FOUND if found else EvidenceStatus.NO_EVIDENCE
    return Projection(evidence_status=status, result=result, scope=scope)


def ensure_within(result: dict[str, Any], scope: dict[str, Any], max_bytes: int) -> None:
    """The last guard: a projector never returns more than its bound, whatever went before."""
    if json_size(result) + json_size(scope) > max_bytes:
        raise ProjectionTooLargeError()
