"""No agent SDK is imported unless an adapter's tools are made: a plain install keeps working.
The old path ``tasks.adapters`` still gives the same objects (deprecated, kept one release)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SDKS = ("openai", "anthropic", "langchain_core", "langgraph", "pydantic_ai", "agents", "httpx2")
ADAPTERS = ("openai", "anthropic", "langchain", "pydantic_ai", "agents")


def test_the_core_tasks_and_every_adapter_import_no_sdk() -> None:
    modules = ", ".join(f"boundary.adapters.{name}" for name in ADAPTERS)
    code = (
        f"import sys, boundary, projectors, tasks, tasks.cli.main, boundary.adapters, {modules}\n"
        f"print(sorted(m for m in {SDKS!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ADAPTERS)
def test_the_old_path_gives_the_same_objects_and_says_it_is_deprecated(name: str) -> None:
    # Given the adapter under its new and its old path
    new = importlib.import_module(f"boundary.adapters.{name}")
    with pytest.warns(DeprecationWarning, match="boundary.adapters"):
        sys.modules.pop("tasks.adapters", None)
        old = importlib.import_module(f"tasks.adapters.{name}")

    # Then every name the old module exports is the very object of the new one
    assert old.__all__
    for public in old.__all__:
        assert getattr(old, public) is getattr(new, public), public
    assert f"boundary.adapters.{name}" in (old.__doc__ or "")
