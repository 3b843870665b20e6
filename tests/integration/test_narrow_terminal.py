"""At 80 columns the demo's tables keep every column and every word whole, and help texts
are reflowed paragraphs (no line ends early where the source broke its docstring)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.demo.script import SCRIPT
from tests.celery.workers import ROOT
from tests.integration.test_process_failures import clean_env

WIDTH = 80
COMMAND = str(Path(sys.executable).with_name("tool-boundary"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args],
        cwd=ROOT,
        env=clean_env(COLUMNS=str(WIDTH)),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_demo_fits_80_columns_with_every_column_and_word() -> None:
    done = run("demo")

    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    header = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    assert "ms" in lines[header + 2] and "tool_call_id" in lines[header + 2]
    rows = "\n".join(lines[header:])
    words = {word for line in rows.splitlines() for word in line.replace("│", " ").split()}
    for number, step in enumerate(SCRIPT, start=1):
        # Each label word, tool and id whole (never split across lines)
        assert set(step.label.replace(",", "").split()) <= {w.strip(",") for w in words}, step
        assert {step.tool, step.tool_call_id} <= words
        expected = step.expect_error.value if step.expect_error else None
        row = next(line for line in lines if line.startswith(f"│ {number} │"))
        assert step.expect_status.value in row
        if expected:
            assert expected in row
    assert "Observed facts of run demo-" in done.stdout
    assert "excluded: error: 2" in done.stdout  # (too large; the cancelled long call)


def help_paragraph_lines(text: str) -> list[list[str]]:
    """The description's paragraphs (between the usage line and the first box)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


@pytest.mark.parametrize("command", [[], ["demo"], ["reproject"], ["show"], ["observe"]])
def test_help_fits_80_columns_and_breaks_lines_only_where_they_are_full(
    command: list[str],
) -> None:
    done = run(*command, "--help")

    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= WIDTH
    for paragraph in help_paragraph_lines(done.stdout):
        for line, following in itertools.pairwise(paragraph):
            # A line ends early only if the next word would not have fitted on it.
            assert len(line) + 1 + len(following.split()[0]) > WIDTH - 4, (line, following)
