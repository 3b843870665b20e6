"""The record-size bound: whether a record, with changes applied, stays under
``Limits.max_record_bytes`` (UTF-8 bytes of its canonical JSON), settled by a cheap bound for
the records far under it (every call's, in practice)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from operator import itemgetter
from typing import Any, get_args

from pydantic import BaseModel

from boundary.limits import canonical_json, utf8_size
from boundary.models import CanonicalRecord

__all__ = ["record_fits", "record_size"]


def record_size(record: CanonicalRecord, **changes: Any) -> int:
    """UTF-8 bytes of the record's canonical JSON, with ``changes`` applied."""
    fields = record.model_dump(mode="json")
    fields.update(changes)
    return utf8_size(canonical_json(fields))


#: At most this many bytes of JSON for a value that is not text: a timestamp, an enum's
#: name, a number, a flag or null.
_SCALAR_JSON_BYTES = 64
#: The record's fields, and what their names, quotes, colons and commas take at most, with
#: the braces: the part of the bound every record shares.
_RECORD_FIELDS = tuple(CanonicalRecord.model_fields)
_RECORD_FRAME_BYTES = 2 + sum(len(name) + 4 for name in _RECORD_FIELDS)
#: Values that are scalars for certain, checked before the nested kinds (whose ``Mapping``
#: check is an ABC's, the dearest of them).
_SCALARS = (int, float, datetime, type(None))
#: The record's text fields (typed ``str`` or ``str | None``) and the others, scalars but for
#: the diagnostic. A text field takes at most 6 bytes a character plus 4 (its quotes, or
#: ``null``); any other at most ``_SCALAR_JSON_BYTES`` (an enum's longest name, if longer).
_TEXT_FIELDS = tuple(
    name
    for name, field in CanonicalRecord.model_fields.items()
    if field.annotation in (str, str | None)
)
_TEXT_SET = frozenset(_TEXT_FIELDS)


def _scalar_bytes(annotation: Any) -> int:
    kinds = get_args(annotation) or (annotation,)
    names = [
        len(member.value) + 2
        for kind in kinds
        if isinstance(kind, type) and issubclass(kind, StrEnum)
        for member in kind
    ]
    return max([_SCALAR_JSON_BYTES, *names])


_FIXED_BYTES = (
    _RECORD_FRAME_BYTES
    + 4 * len(_TEXT_FIELDS)
    + sum(
        _scalar_bytes(field.annotation)
        for name, field in CanonicalRecord.model_fields.items()
        if name not in _TEXT_SET
    )
)
_text_values = itemgetter(*_TEXT_FIELDS)


def _size_bound(record: CanonicalRecord, changes: Mapping[str, Any]) -> int | None:
    """An upper bound of ``record_size(record, **changes)`` without serializing the record, or
    ``None`` when it has a nested value (a diagnostic). A character of text takes at most 6
    bytes of JSON (a control character, written ``\\u001f``); a field's name, quotes, colon
    and comma at most its length plus 4.

    The record's fields hold their declared kinds (it was validated): only its text is
    measured, in one pass. A diagnostic, or a change that is not text given to a text field,
    is bounded field by field (``_any_size_bound``)."""
    values = record.__dict__
    if values["diagnostic"] is not None:
        return None
    if changes:
        values = {**values, **changes}
        for name, value in changes.items():
            if name not in _TEXT_SET or not (value is None or value.__class__ is str):
                return _any_size_bound(values)
    return _FIXED_BYTES + 6 * sum(map(len, filter(None, _text_values(values))))


def _any_size_bound(values: Mapping[str, Any]) -> int | None:
    """``_size_bound`` of the record's field values, whatever their kinds."""
    total = _RECORD_FRAME_BYTES
    for name in _RECORD_FIELDS:
        value = values[name]
        if isinstance(value, str):
            total += 6 * len(value) + 2
        elif isinstance(value, _SCALARS):
            total += _SCALAR_JSON_BYTES
        elif isinstance(value, BaseModel | Mapping | list):
            return None
        else:
            total += _SCALAR_JSON_BYTES
    return total


def record_fits(record: CanonicalRecord, max_bytes: int, **changes: Any) -> bool:
    """Whether the record, with ``changes`` applied, is at most ``max_bytes`` of canonical
    JSON. A record far under the limit (every call's, in practice) is settled by a bound;
    only one near it is serialized (``record_size``)."""
    bound = _size_bound(record, changes)
    if bound is not None and bound <= max_bytes:
        return True
    return record_size(record, **changes) <= max_bytes
