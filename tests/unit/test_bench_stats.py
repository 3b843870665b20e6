"""The bench's spreads: every ratio is quoted as the median of its pairs with min-max, and
flagged noisy past a 10 % spread (``bench.reports.stats``, ``bench.suite.b2_latency.block_ratios``,
``bench.reports.report``)."""

from __future__ import annotations

import pytest

from bench.reports.report import targets
from bench.reports.spreads import spreads
from bench.reports.stats import NOISY_SPREAD, quoted, spread
from bench.suite.b2_latency import block_ratios


def test_a_spread_within_ten_percent_is_not_noisy_and_one_past_it_is() -> None:
    # Given two sets of pair ratios around 1.0
    quiet = spread([0.96, 1.0, 1.04])
    loud = spread([0.9, 1.0, 1.11])

    # Then the first spans 8 % of its median and the second 21 %
    assert quiet["spread"] == pytest.approx(0.08)
    assert not quiet["noisy"]
    assert loud["noisy"]
    assert loud["n"] == 3
    assert NOISY_SPREAD == 0.10
    # And a quoted figure says so
    assert quoted(loud) == "1 (0.9-1.11) noisy"
    assert quoted(quiet) == "1 (0.96-1.04)"


def test_no_values_give_a_noisy_nan() -> None:
    assert spread([])["noisy"]
    assert spread([])["n"] == 0


def test_block_ratios_take_the_p50_ratio_of_each_block_of_pairs() -> None:
    # Given 8 paired samples, the first half twice as slow on our side as the second
    ours = [2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    peer = [1.0] * 8

    # When they are split into two blocks
    ratios = block_ratios(ours, peer, 2)

    # Then each block has its own ratio
    assert ratios == [2.0, 1.0]
    # And one block is the ratio over all samples
    assert block_ratios(ours, peer, 1) == [1.5]


def test_targets_carry_the_spread_of_their_ratio() -> None:
    # Given a run whose B1 threads ratio spread over four pairs is 20 %
    results = {
        "b1": {
            "threads c=8": {
                "pool": "threads",
                "concurrency": 8,
                "ratio": {"median": 1.0, "min": 0.9, "max": 1.1},
                "cpu_ratio": {"median": 1.0, "min": 0.99, "max": 1.01},
                "ours_per_s": [1.0],
                "bare_per_s": [1.0],
            }
        }
    }

    # When its targets are made
    rows = {row["figure"]: row for row in targets({"b1_threads_ratio": 1.0}, spreads(results))}

    # Then the row says the ratio is noisy, with its spread
    assert rows["b1_threads_ratio"]["noisy"]
    assert rows["b1_threads_ratio"]["spread"]["min"] == 0.9
    assert "spread" not in rows["b1_prefork_ratio"]
