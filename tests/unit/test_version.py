"""One version: ``boundary.__version__`` is what pyproject.toml builds, what ``tasks`` and
``tool-boundary --version`` say, and the newest release in CHANGELOG.md."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from typer.testing import CliRunner

import boundary
import tasks
from tasks.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_written_once_and_read_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "boundary.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", boundary.__version__)
    assert tasks.__version__ == boundary.__version__


def test_the_changelog_starts_with_this_version() -> None:
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases[0] == boundary.__version__
    assert "0.5.0" in releases


def test_tool_boundary_version_prints_it() -> None:
    done = CliRunner().invoke(cli, ["--version"])
    assert done.exit_code == 0
    assert done.output.strip() == f"tool-boundary {boundary.__version__}"
