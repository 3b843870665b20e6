"""B9's figure in the report: ``python -m bench``'s figures, target row and spreads take the
live calls' p50 ratio from B9's results, and the study's table states it against its target.
(The measurement itself runs in ``tests/bench/test_live_during_job.py``.)"""

from __future__ import annotations

from typing import Any

from bench.reports.report import figures, targets
from bench.reports.spreads import spreads
from bench.reports.stats import spread
from bench.studies.live_during_job import parse_rate, table
from bench.suite.b9_live_during_job import TARGET, Knobs


def _block(p50: float, p95: float) -> dict[str, Any]:
    return {
        "p50_ms": p50,
        "p95_ms": p95,
        "seconds": 2.0,
        "live_worker_cores": 0.4,
        "job_worker_cores": 1.6,
        "load": 3.1,
    }


def _results(ratios: list[float]) -> dict[str, Any]:
    reps = []
    for n, ratio in enumerate(ratios):
        busy = _block(10.0 * ratio, 30.0) | {
            "job": {"records": 4000, "records_per_s": 2000.0, "restarts": 0}
        }
        reps.append(
            {
                "busy_first": n % 2 == 1,
                "idle": _block(10.0, 20.0),
                "busy": busy,
                "p50_ratio": ratio,
                "p95_ratio": 1.5,
            }
        )
    return {
        "target": f"<= {TARGET:g}",
        "records": 50_000,
        "knobs": Knobs(rate=(500.0, 1.0), job_nice=10).as_dict(),
        "p50_ratio": spread(ratios),
        "p95_ratio": spread([1.5] * len(ratios)),
        "idle_p50_ms": 10.0,
        "busy_p50_ms": 10.0 * sorted(ratios)[len(ratios) // 2],
        "job_records_per_s": spread([2000.0] * len(ratios)),
        "restarts": 0,
        "met": sorted(ratios)[len(ratios) // 2] <= TARGET,
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [2.0, 1.0, 1.0],
        "repetitions": reps,
    }


def test_the_report_takes_b9s_median_ratio_and_judges_it_against_1_5() -> None:
    # Given B9's results with repetitions at 1.4, 2.2 and 2.0
    results = {"b9": _results([1.4, 2.2, 2.0])}

    # When the report's figures, spreads and targets are made
    figs = figures(results)
    rows = {row["figure"]: row for row in targets(figs, spreads(results))}

    # Then the figure is the median of the repetitions, and the target is missed, with the
    # repetitions' spread beside it
    assert figs["b9_live_p50_ratio"] == 2.0
    assert figs["b9_job_records_per_s"] == 2000.0
    row = rows["b9_live_p50_ratio"]
    assert (row["target"], row["met"]) == ("<= 1.5", False)
    assert (row["spread"]["min"], row["spread"]["max"]) == (1.4, 2.2)


def test_a_ratio_at_or_under_1_5_meets_the_target() -> None:
    rows = {row["figure"]: row for row in targets(figures({"b9": _results([1.1, 1.5, 1.3])}))}
    assert rows["b9_live_p50_ratio"]["met"] is True


def test_the_studys_table_names_the_knobs_and_the_verdict() -> None:
    text = table(_results([1.4, 2.2, 2.0]))
    assert "prefork c=2 nice 10, lanes 2, rate 500/1s" in text
    assert "2.00 (1.40-2.20), target <= 1.5: missed" in text
    assert text.count("rep ") == 3


def test_a_rate_is_records_per_period() -> None:
    assert parse_rate("500/2") == (500.0, 2.0)
    assert parse_rate("300") == (300.0, 1.0)
    assert parse_rate(None) is None
