"""Small statistics: percentiles, medians and spreads, without numpy."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of repeated figures (a ratio over repetitions or runs)."""
    if not values:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def ms(seconds: float) -> float:
    return seconds * 1000.0
