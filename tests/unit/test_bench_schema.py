"""The schema-validation benchmark runs (its figures are quoted in bench/README.md)."""

from __future__ import annotations

from bench.studies.schema_validation import measure


def test_the_schema_benchmark_measures_every_side() -> None:
    figures = measure(calls=20, rounds=2)

    assert set(figures["us_per_preflight"]) == {
        "no_schema",
        "schema",
        "schema_refused",
        "check_only",
        "refusal_only",
    }
    assert all(value > 0 for value in figures["us_per_preflight"].values())
    assert figures["schema_ratio"] > 0
