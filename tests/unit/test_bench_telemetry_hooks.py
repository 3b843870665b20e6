"""``python -m bench.studies.telemetry_hooks`` runs and reports each mode's CPU per call (the
figures themselves are not asserted: no test asserts on timing)."""

from __future__ import annotations

import json

import pytest

from bench.studies import telemetry_hooks


def test_the_hooks_bench_reports_every_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert telemetry_hooks.main(["--calls", "300", "--repetitions", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    figures = report["cpu_us_per_call"]
    assert set(figures) == {"off", "noop", "sdk"}
    assert all(len(values) == 1 and values[0] > 0 for values in figures.values())
