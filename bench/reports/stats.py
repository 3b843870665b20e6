"""Small statistics: percentiles, medians and spreads, without numpy."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


#: A spread (max - min, over the median) past this says the figure is noisy: on a shared
#: 2-core machine a gap smaller than its spread is not a measured gap.
NOISY_SPREAD = 0.10


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min and max of repeated figures (a ratio over alternating pairs, or over
    runs), their spread relative to the median, how many, and whether that spread is past
    ``NOISY_SPREAD``."""
    if not values:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0, "noisy": True}
    median = statistics.median(values)
    low, high = min(values), max(values)
    relative = (high - low) / abs(median) if median else math.inf
    return {
        "median": median,
        "min": low,
        "max": high,
        "n": len(values),
        "spread": relative,
        "noisy": relative > NOISY_SPREAD,
    }


def quoted(figure: dict[str, Any]) -> str:
    """``median (min-max)``, with ``noisy`` after it when the spread is past the bound."""
    text = f"{figure['median']:.3g} ({figure['min']:.3g}-{figure['max']:.3g})"
    return f"{text} noisy" if figure.get("noisy") else text


def ms(seconds: float) -> float:
    return seconds * 1000.0
