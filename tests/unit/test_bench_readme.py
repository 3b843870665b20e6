"""bench/README.md's tables are generated from the committed per-run JSON
(``python -m bench.readme``): a stale table fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import readme


def test_committed_readme_tables_match_the_committed_runs() -> None:
    # Given the README and the runs committed under bench/results
    text = readme.README.read_text()

    # When every generated block is rendered again
    fresh = readme.render(text)

    # Then nothing changes (else: python -m bench.readme, and commit the result)
    assert fresh == text, "bench/README.md is stale: run python -m bench.readme"
    assert "<!-- bench:table" in text


def _run(ratio: float) -> dict[str, object]:
    return {
        "meta": {"command": "python -m bench", "load_before": [1.0, 1.0, 1.0]},
        "figures": {"b1_threads_ratio": ratio, "b4_round_trips": 2},
        "results": {},
    }


def test_a_changed_run_makes_the_table_stale_and_check_reports_it(tmp_path: Path) -> None:
    # Given a README with a targets block rendered from two runs
    runs = tmp_path / "results"
    runs.mkdir()
    for n, ratio in enumerate((0.91, 0.95), start=1):
        (runs / f"run{n}.json").write_text(json.dumps(_run(ratio)))
    page = tmp_path / "README.md"
    page.write_text("# x\n<!-- bench:table targets results/*.json -->\nold\n<!-- bench:end -->\n")
    assert readme.main(["--readme", str(page)]) == 0
    assert "0.93 (0.91-0.95)" in page.read_text()
    assert readme.main(["--readme", str(page), "--check"]) == 0

    # When a run's figure changes
    (runs / "run2.json").write_text(json.dumps(_run(0.85)))

    # Then the check fails, and rendering again shows the new median
    assert readme.main(["--readme", str(page), "--check"]) == 1
    assert "0.88 (0.85-0.91)" in readme.render(page.read_text(), tmp_path)


def test_a_block_without_runs_or_renderer_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(readme.ReadmeError):
        readme.render("<!-- bench:table targets none/*.json -->\n<!-- bench:end -->", tmp_path)
    with pytest.raises(readme.ReadmeError):
        readme.render("<!-- bench:table nosuch *.md -->\n<!-- bench:end -->", tmp_path)
