"""Every framework example runs offline as its own process (embedded Redis-protocol server and
a real Celery worker thread), and keeps its glue within five marked lines."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "frameworks"
#: Each example and the SDK module it needs.
SDKS = {
    "openai_chat": "openai",
    "openai_responses": "openai",
    "anthropic_messages": "anthropic",
    "langgraph_agent": "langgraph",
    "pydantic_ai_agent": "pydantic_ai",
    "agents_sdk": "agents",
}
#: The most lines of glue an example may need.
MAX_GLUE_LINES = 5


def glue_lines(example: str) -> list[str]:
    text = (EXAMPLES / f"{example}.py").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.rstrip().endswith("# glue")]


def test_every_example_is_listed() -> None:
    found = {p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")}
    assert found == set(SDKS)


def test_the_docs_table_gives_each_examples_glue_lines() -> None:
    readme = (ROOT / "docs" / "how-to" / "agent-frameworks.md").read_text(encoding="utf-8")
    rows = re.findall(
        r"^\| [^|]+ \| `tool-boundary\[[a-z-]+\]` \| `examples\.frameworks\.(\w+)` \| (\d+) \|$",
        readme,
        re.MULTILINE,
    )
    assert {name: int(count) for name, count in rows} == {
        example: len(glue_lines(example)) for example in SDKS
    }


@pytest.fixture(scope="module")
def example_runs() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every example whose SDK is installed, run at once (each mostly waits: its embedded
    worker's start and stop), so the suite pays about one run instead of six."""
    # Embedded mode: no TOOL_BOUNDARY_* setting reaches the examples.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    env["PYTHONPATH"] = str(ROOT)
    running = {
        example: subprocess.Popen(
            [sys.executable, "-m", f"examples.frameworks.{example}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for example, sdk in SDKS.items()
        if importlib.util.find_spec(sdk) is not None
    }
    runs = {}
    for example, process in running.items():
        try:
            stdout, stderr = process.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        runs[example] = subprocess.CompletedProcess(
            process.args, process.returncode, stdout, stderr
        )
    return runs


@pytest.mark.parametrize("example", sorted(SDKS))
def test_the_example_runs_offline_with_at_most_five_glue_lines(
    example: str, example_runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    if example not in example_runs:
        pytest.skip(f"{SDKS[example]} is not installed")
    assert 0 < len(glue_lines(example)) <= MAX_GLUE_LINES
    done = example_runs[example]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "answer:" in done.stdout
    assert "Traceback" not in done.stderr
