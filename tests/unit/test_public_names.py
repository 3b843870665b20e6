"""The public face: every name of ``boundary.__all__`` and ``tasks.__all__`` resolves, every
name a package's ``__init__`` takes from its modules and does not use itself is in its
``__all__``, and every import the design document lists still works from where it lists it."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("boundary", "tasks")
#: Names the design document promises in prose (``tasks.boundary_from_env(...)``, "the
#: ``Dispatcher`` protocol") rather than in an import line.
PROMISED = {
    "boundary": (
        "CallInfo",
        "Dispatcher",
        "InProcessDispatcher",
        "ObservedFacts",
        "Projector",
        "RunBoundary",
        "Submission",
    ),
    "tasks": ("aboundary_from_env", "boundary_from_env", "configure"),
}
#: ``from boundary import (A, B,\n C)`` or ``from tasks import A, B`` in a code block.
IMPORT_LINE = re.compile(r"^from ((?:boundary|tasks)(?:\.\w+)*) import (\([^)]*\)|[^\n#]*)", re.M)


def design_document() -> Path:
    """The design document, wherever under ``docs/`` it lives."""
    found = [path for path in sorted(ROOT.glob("docs/**/*.md")) if path.name.lower() == "design.md"]
    assert found, "no design.md under docs/"
    return found[0]


def listed_imports() -> list[tuple[str, str]]:
    """``(module, name)`` for every name the design document imports."""
    listed = []
    for match in IMPORT_LINE.finditer(design_document().read_text(encoding="utf-8")):
        names = match.group(2).strip().strip("()")
        for name in re.split(r"[,\s]+", names):
            if name:
                listed.append((match.group(1), name))
    return listed


def test_the_design_document_lists_imports_from_both_packages() -> None:
    modules = {module for module, _ in listed_imports()}
    assert {"boundary", "tasks"} <= modules
    assert ("boundary", "ToolBoundary") in listed_imports()


@pytest.mark.parametrize(("module", "name"), listed_imports())
def test_every_import_the_design_document_lists_works(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_of_all_resolves_once(package: str) -> None:
    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.{name}"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_names_the_design_promises_are_in_all(package: str) -> None:
    module = importlib.import_module(package)
    assert set(PROMISED[package]) <= set(module.__all__)


def reexported(path: Path) -> set[str]:
    """Public names a package's ``__init__`` imports and never uses itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return {name for name in imported - used if not name.startswith("_")}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_reexport_is_in_all(package: str) -> None:
    module = importlib.import_module(package)
    assert reexported(ROOT / package / "__init__.py") <= set(module.__all__)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_grouped_with_a_comment_per_group(package: str) -> None:
    # Each group of __all__ starts with its comment ("# Calls: ..."); names sorted within.
    source = (ROOT / package / "__init__.py").read_text(encoding="utf-8")
    lines = source[source.index("__all__ = [") :].split("]", 1)[0].splitlines()[1:]
    groups: list[list[str]] = []
    for line in (line.strip() for line in lines):
        if line.startswith("#"):
            if not groups or groups[-1]:
                groups.append([])  # a new group's (first) comment line
        else:
            assert groups, f"{line} comes before the first group's comment"
            groups[-1].extend(re.findall(r'"(\w+)"', line))
    assert len(groups) >= 2
    for names in groups:
        assert names
        assert names == sorted(names, key=lambda n: (n[0].islower(), n))
