"""The shared fitting helpers: cutting text and items to a byte bound of canonical JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundary import ErrorCode
from projectors._fit import (
    MIN_MAX_BYTES,
    TRUNCATION_MARK,
    MalformedRawError,
    ProjectionTooLargeError,
    bounded_value,
    build_scope,
    check_max_bytes,
    ensure_within,
    fit_items,
    json_size,
    shorten,
)


class TestShorten:
    def test_text_that_fits_is_returned_unchanged(self) -> None:
        assert shorten("hello", 7) == ("hello", False)

    def test_text_one_byte_over_is_cut_by_one_character(self) -> None:
        assert shorten("hello!", 7) == ("hello", True)

    def test_escapes_count_as_the_bytes_json_spends_on_them(self) -> None:
        # '"' is written as \" (2 bytes), a NUL as \u0000 (6 bytes).
        assert shorten('a"b', 5) == ('a"', True)
        assert shorten("a\x00", 9) == ("a\x00", False)
        assert shorten("a\x00", 8) == ("a", True)

    @pytest.mark.parametrize("char", ["é", "€", "🙂"])
    def test_multibyte_text_is_cut_between_characters(self, char: str) -> None:
        size = len(char.encode())
        text, cut = shorten(char * 10, 2 + 3 * size + size - 1)
        assert (text, cut) == (char * 3, True)

    def test_the_mark_is_appended_within_the_bound(self) -> None:
        text, cut = shorten("abcdefghij", 8, TRUNCATION_MARK)
        assert (text, cut) == ("abc…", True)
        assert json_size(text) == 8

    def test_a_bound_too_small_for_the_mark_gives_an_empty_text(self) -> None:
        assert shorten("abcdef", 4, TRUNCATION_MARK) == ("", True)

    def test_lone_surrogates_are_replaced_so_the_text_encodes(self) -> None:
        text, _ = shorten("a\ud800b", 10)
        assert text == "a?b"

    @given(text=st.text(), bound=st.integers(min_value=2, max_value=300))
    def test_the_result_always_fits_and_is_a_prefix(self, text: str, bound: int) -> None:
        result, cut = shorten(text, bound)
        assert json_size(result) <= bound
        assert text.startswith(result)
        assert cut == (result != text)


class TestBoundedValue:
    def test_a_small_value_is_kept_as_it_is(self) -> None:
        assert bounded_value({"a": [1, 2]}, 100) == ({"a": [1, 2]}, False)

    def test_a_large_value_becomes_its_json_text_cut_and_marked(self) -> None:
        value, cut = bounded_value(list(range(100)), 20)
        assert cut is True
        assert value.startswith("[0,1,2")
        assert value.endswith(TRUNCATION_MARK)
        assert json_size(value) <= 20


class TestBuildScope:
    def test_the_scope_holds_the_corpus_and_the_named_arguments_present(self) -> None:
        scope = build_scope("docs", {"query": "q", "limit": 3}, ("query", "missing"))
        assert scope == {"corpus": "docs", "query": "q"}

    def test_a_request_that_is_not_an_object_gives_the_corpus_only(self) -> None:
        assert build_scope("docs", ["query"], ("query",)) == {"corpus": "docs"}

    def test_a_long_value_is_cut_and_the_scope_says_so(self) -> None:
        scope = build_scope("docs", {"query": "q" * 1000}, ("query",), max_value_bytes=50)
        assert scope["truncated"] is True
        assert json_size(scope["query"]) <= 50


def render_numbers(shown: Sequence[int]) -> dict[str, Any]:
    return {"items": list(shown), "omitted": 10 - len(shown)}


class TestFitItems:
    def test_the_longest_prefix_that_fits_is_kept(self) -> None:
        items = [1000 + i for i in range(10)]
        budget = json_size(render_numbers(items[:4]))

        result = fit_items(items, render_numbers, budget)

        assert result == {"items": items[:4], "omitted": 6}

    def test_the_first_item_that_does_not_fit_is_shrunk_when_possible(self) -> None:
        items = ["a" * 50, "b" * 50]
        budget = json_size({"items": items[:1], "omitted": 9}) + 20

        def render(shown: Sequence[str]) -> dict[str, Any]:
            return {"items": list(shown), "omitted": 10 - len(shown)}

        def shrink(item: str, room: int) -> str | None:
            return shorten(item, room)[0]

        result = fit_items(items, render, budget, shrink)

        assert result["items"][0] == "a" * 50
        assert result["items"][1].startswith("b")
        assert json_size(result) <= budget

    def test_a_fixed_part_over_the_budget_is_a_projection_error(self) -> None:
        with pytest.raises(ProjectionTooLargeError) as raised:
            fit_items([1], render_numbers, 5)
        assert raised.value.code is ErrorCode.PROJECTION_FAILED


def test_ensure_within_refuses_a_projection_over_its_bound() -> None:
    with pytest.raises(ProjectionTooLargeError):
        ensure_within({"a": "x" * 100}, {"corpus": "c"}, 50)


def test_malformed_raw_names_the_place_but_keeps_the_message_safe() -> None:
    error = MalformedRawError("hits[3].score")
    assert error.where == "hits[3].score"
    assert str(error) == ErrorCode.PROJECTION_FAILED.value


@pytest.mark.parametrize("bad", [MIN_MAX_BYTES - 1, 0, -5])
def test_a_bound_below_the_minimum_is_refused(bad: int) -> None:
    with pytest.raises(ValueError):
        check_max_bytes(bad)


def test_a_bound_that_is_not_an_int_is_refused() -> None:
    with pytest.raises(TypeError):
        check_max_bytes(True)
