"""The docs site builds with ``--strict`` (a broken link, anchor or reference fails), and its
generated reference lists every public name of ``boundary`` and ``tasks`` (``__all__``), every
setting, every error code and every CLI command: a new one the reference does not show fails
here."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import boundary
import tasks
from boundary import ErrorCode
from tasks.cli.main import cli
from tests.docs.blocks import ROOT

sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import reference


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out


def page(site: Path, name: str) -> str:
    return html.unescape((site / name / "index.html").read_text(encoding="utf-8"))


@pytest.mark.parametrize("package", [boundary, tasks], ids=lambda p: p.__name__)
def test_the_api_reference_documents_every_name_of_all(site: Path, package: object) -> None:
    name = package.__name__  # type: ignore[attr-defined]
    text = page(site, f"reference/{name}")
    missing = [
        member
        for member in package.__all__  # type: ignore[attr-defined]
        if f'id="{name}.{member}"' not in text
    ]
    assert not missing, f"reference/{name}.md lacks {missing}"


def test_the_settings_reference_lists_every_setting_with_its_default(site: Path) -> None:
    text = page(site, "reference/settings")
    rows = list(reference.settings_rows())
    assert len(rows) >= 40
    for variable, _, _, comment in rows:
        assert f"<code>{variable}</code>" in text, variable
        assert html.unescape(comment.split("`")[0][:30]) in text, variable


def test_every_setting_has_its_comment() -> None:
    # settings_rows() raises, naming the field, for a setting without its '#:' comment
    for _prefix, cls in reference.settings_classes():
        documented = {row[0] for row in reference.settings_rows()}
        for field in cls.model_fields:
            assert _prefix + field.upper() in documented


def test_the_error_codes_and_cli_references_are_complete(site: Path) -> None:
    codes = page(site, "reference/error-codes")
    assert all(f"<code>{code.value}</code>" in codes for code in ErrorCode)
    commands = page(site, "reference/cli")
    root = typer.main.get_command(cli)
    names = root.list_commands(root.context_class(root))  # type: ignore[attr-defined]
    assert names and all(f"tool-boundary {name}</code>" in commands for name in names)
    assert "EXIT_INTERRUPTED" in commands


def test_the_readme_is_the_landing_page(site: Path) -> None:
    text = page(site, "")
    assert "An agent loop" in text
    assert 'href="contributing/"' in text  # docs/ links made relative to the site
