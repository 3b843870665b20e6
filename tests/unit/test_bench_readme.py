"""bench/README.md's tables are generated from the committed per-run JSON
(``python -m bench.reports.readme``): a stale table fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.reports import readme


def test_committed_readme_tables_match_the_committed_runs() -> None:
    # Given the README and the runs committed under bench/results
    text = readme.README.read_text()

    # When every generated block is rendered again
    fresh = readme.render(text)

    # Then nothing changes (else: python -m bench.reports.readme, and commit the result)
    assert fresh == text, "bench/README.md is stale: run python -m bench.reports.readme"
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


def _stall(calls: int, worst_ms: float, resources: dict[str, object] | None = None) -> dict:
    stall: dict[str, object] = {
        "calls": calls,
        "calls_per_s": 100.0,
        "ticks": 50,
        "tick_lateness": {"p50_ms": 0.2, "p99_ms": 4.0, "max_ms": worst_ms},
        "longest_step_cpu_ms": 1.5,
        "steps": 900,
        "tick_cpu": {"p50_ms": 0.1, "p99_ms": 2.0, "max_ms": worst_ms - 1},
    }
    if calls != 500:  # a run from before the levels has no loop CPU per call
        stall["loop_cpu_ms_per_call"] = 1.25
    if resources is not None:
        stall["resources"] = resources
    return stall


def _b7_run(*, levels: bool) -> dict[str, object]:
    b7: dict[str, object] = {
        "pool": "threads c=8",
        "throughput": {"async_per_s": [80.0], "sync_per_s": [100.0], "ratio": {"median": 0.8}},
        "precision": {"samples": 2},
    }
    if levels:
        resources = {"rss_peak_growth_mib": 11.5, "sockets_peak": 131, "redis_clients_peak": 186}
        measured = [_stall(60, 25.0), _stall(200, 33.0), _stall(1000, 81.0, resources)]
        b7["stalls"] = {
            "levels": measured,
            "repeat": {
                "calls": 60,
                "runs": 3,
                "bound_ms": 50.0,
                "under_bound": 2,
                "worst_ms": [20.0, 61.0, 30.0],
                "longest_step_cpu_ms": [1.0, 1.2, 1.1],
            },
        }
        b7["stall"] = measured[-1]
    else:
        b7["stall"] = _stall(500, 208.0)
    return {"meta": {"command": "python -m bench --only b7"}, "figures": {}, "results": {"b7": b7}}


def test_the_b7_tables_render_runs_from_before_and_after_the_stall_levels(
    tmp_path: Path,
) -> None:
    # Given one run from before the stall levels (one stall of 500) and one with them
    runs = tmp_path / "results"
    runs.mkdir()
    (runs / "run1.json").write_text(json.dumps(_b7_run(levels=False)))
    (runs / "run2.json").write_text(json.dumps(_b7_run(levels=True)))
    loaded = readme.load_runs("results/*.json", tmp_path)

    # When the stall table and the older B7 table are rendered
    stalls = readme.b7_stalls_table(loaded)
    older = readme.b7_table(loaded)

    # Then the old run shows its one stall, the new one each level, with memory and
    # connections at 1,000 and the repeated runs counted against the bound
    assert "| `results/run1.json` | 500 | 0.2 / 4 / **208** | 1.5 | 207 | - | - |" in stalls
    for calls, worst in ((60, "25.0"), (200, "33.0"), (1000, "81.0")):
        assert f"| `results/run2.json` | {calls} | 0.2 / 4 / **{worst}** |" in stalls
    assert "| 1.25 | RSS +11.5 MiB, 131 sockets, 186 Redis clients |" in stalls
    assert "**2 of 3** under 50 ms | 20.0, 61.0, 30.0 |" in stalls
    # And the older table still reads both (the new run's largest level as its stall)
    assert "| `results/run1.json` | 500 |" in older
    assert "| `results/run2.json` | 1000 |" in older


def test_the_b7_figures_and_targets_come_from_the_stall_levels() -> None:
    # Given a B7 result with stall levels
    from bench.reports.report import figures, targets

    results = _b7_run(levels=True)["results"]
    assert isinstance(results, dict)

    # When its figures and targets are derived
    figs = figures(results)
    rows = {row["figure"]: row for row in targets(figs)}

    # Then each level has its figures, the largest its resources, the repeat its count
    assert figs["b7_200_tick_lateness_max_ms"] == 33.0
    assert figs["b7_1000_rss_peak_growth_mib"] == 11.5
    assert figs["b7_1000_sockets_peak"] == 131
    assert figs["b7_200_loop_cpu_ms_per_call"] == 1.25
    assert figs["b7_60_runs_under_50_ms"] == 2
    assert figs["b7_60_runs_worst_ms"] == 61.0
    # And the targets are judged: 33 ms is not under 20, 2 runs are not 10 of 10
    assert rows["b7_200_tick_lateness_max_ms"]["met"] is False
    assert rows["b7_60_runs_under_50_ms"]["met"] is False


def test_the_current_table_says_the_persistence_each_set_ran_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given two sets, one on an append-only file fsynced every second, one from before the
    # bench read the server's persistence
    from bench.reports import current

    def run(path: str, persistence: dict[str, str] | None) -> readme.Run:
        meta: dict[str, object] = {"command": "python -m bench", "commit": "abc1234"}
        if persistence is not None:
            meta["persistence"] = persistence
        return readme.Run(path, {"meta": meta, "figures": {"b1_threads_ratio": 1.0}})

    aof = {"appendonly": "yes", "appendfsync": "everysec", "save": ""}
    monkeypatch.setattr(
        current,
        "ROWS",
        (
            ("B1 on AOF", "aof", "run", current.figure("b1_threads_ratio"), ">=", 0.95),
            ("B1 before", "old", "run", current.figure("b1_threads_ratio"), ">=", 0.95),
        ),
    )

    # When the current table is rendered
    table = current.current_table(
        [run("results/aof/run1.json", aof), run("results/old/run1.json", None)]
    )

    # Then each row says its set's persistence
    assert "| `aof` | AOF everysec | abc1234 |" in table
    assert "| `old` | not recorded | abc1234 |" in table
    # And the labels cover a server without persistence and one with snapshots
    assert current.persistence_label({"appendonly": "no", "save": ""}) == "none"
    assert current.persistence_label({"appendonly": "no", "save": "3600 1"}) == "RDB snapshots"
