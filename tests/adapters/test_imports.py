"""No agent SDK is imported unless its own adapter is: a plain install keeps working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDKS = ("openai", "anthropic", "langchain_core", "langgraph", "pydantic_ai", "agents", "httpx2")


def test_the_core_tasks_and_sdk_free_adapters_import_no_sdk() -> None:
    code = (
        "import sys, boundary, projectors, tasks, tasks.adapters, tasks.adapters.openai, "
        "tasks.adapters.anthropic, tasks.cli\n"
        f"print(sorted(m for m in {SDKS!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
