"""The bench's old module names (``bench/X.py`` calling ``bench.moved.moved``) still work: on
import the old name is the new module itself, and ``python -m`` runs the new module's main;
every ``python -m bench...`` the docs quote names a module that exists."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def aliases() -> dict[str, str]:
    """Old module name -> new one, for every alias module at the top of ``bench/``."""
    found = {}
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "moved"
                and isinstance(node.args[1], ast.Constant)
            ):
                found[f"bench.{path.stem}"] = str(node.args[1].value)
    return found


def test_there_are_aliases() -> None:
    assert aliases()["bench.bare"] == "bench.peers.bare"


@pytest.mark.parametrize(("old", "new"), sorted(aliases().items()))
def test_an_old_name_imports_the_new_module_itself(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


def test_an_old_name_runs_the_new_module_under_dash_m() -> None:
    # (check_output raises when it exits with an error)
    usage = subprocess.check_output(
        [sys.executable, "-m", "bench.ceiling", "--help"], cwd=ROOT, text=True, timeout=120
    )
    assert "python -m bench.studies.ceiling" in usage


def quoted_modules() -> set[str]:
    """Every module named by ``python -m bench...`` in the README and the docs."""
    texts = [ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")]
    found = set()
    for path in texts:
        found |= set(re.findall(r"python -m (bench(?:\.[a-z0-9_]+)*)", path.read_text()))
    return found


def test_every_module_the_docs_run_exists() -> None:
    quoted = quoted_modules()
    assert "bench.ceiling" in quoted
    for name in sorted(quoted):
        assert importlib.util.find_spec(name) is not None, name
