"""The worker commands a newcomer copies from the docs serve every queue of the tools it
serves: with the default registry (``tasks.demo.tools:registry``), the long example tools run on
``long``, so a worker started ``-Q tools,projections`` never runs them and a long MCP call
waits until the client gives up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from boundary.registry import load_registry
from tasks.settings import DEFAULT_TOOLS
from tasks.wiring.app import PROJECTIONS_QUEUE

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: A worker command's queues: ``celery -A tasks worker ... -Q a,b``.
WORKER_QUEUES = re.compile(r"celery -A tasks worker\b[^`\n]*?-Q (?P<queues>[\w,]+)")


def section(page: str) -> str:
    """The page's text up to its second-level sections (what a newcomer follows first)."""
    text = (DOCS / page).read_text()
    end = text.find("\n## ")
    return text[: end if end != -1 else len(text)]


def default_queues() -> set[str]:
    """The queues the default registry's tools and their projections run on."""
    registry = load_registry(DEFAULT_TOOLS)
    return {spec.queue for spec in registry} | {PROJECTIONS_QUEUE}


@pytest.mark.parametrize("title", ["how-to/mcp.md", "getting-started/first-deployment.md"])
def test_the_readmes_worker_commands_consume_every_queue_of_the_default_tools(title: str) -> None:
    # Given the docs page a newcomer follows, and the queues of the tools it serves
    needed = default_queues()
    assert "long" in needed  # scan_metrics, audit_metrics

    # When every queue its worker commands consume is collected
    commands = WORKER_QUEUES.findall(section(title))
    consumed = {queue for queues in commands for queue in queues.split(",")}

    # Then no tool's queue is left without a worker
    assert commands, f"no worker command in {title!r}"
    assert needed <= consumed, f"{title!r}: no worker for {sorted(needed - consumed)}"
