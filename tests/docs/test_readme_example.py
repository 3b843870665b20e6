"""The README's agent loop runs as written: its module is extracted, a real worker loads its
tools by ``TOOL_BOUNDARY_TOOLS`` and ``PYTHONPATH`` as the README's commands say, and the agent
runs twice against one Redis (store, broker and result backend), each run with its own ids,
printing exactly the lines the README shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import redis

from tasks.settings import Settings
from tests.celery.workers import ROOT, celery_process, worker_args
from tests.conftest import STORE_DB, redis_url
from tests.docs.blocks import blocks

README = ROOT / "README.md"


def example() -> tuple[str, str, list[str]]:
    """The README's Python module, its shell commands and the output it shows."""
    found = blocks(README)
    python = [block.code for block in found if block.is_python]
    shell = [block.code for block in found if block.lang == "bash"]
    text = [block.code for block in found if block.lang == "text"]
    assert len(python) == 1 and len(text) == 1
    return python[0], next(s for s in shell if "agent.py" in s), text[0].splitlines()


def test_the_readme_says_how_to_start_a_worker_with_the_example_and_run_it() -> None:
    module, commands, _ = example()
    assert module.startswith("# agent.py")
    assert "tasks.boundary_from_env(registry)" in module
    assert re.search(
        r"TOOL_BOUNDARY_TOOLS=agent:registry PYTHONPATH=\. \S*celery -A tasks", commands
    )
    assert "python agent.py" in commands


def test_the_readme_example_runs_twice_against_a_real_worker(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    # Given the README's module, and one Redis URL for store, broker and result backend
    module, _, shown = example()
    (tmp_path / "agent.py").write_text(module)
    url = redis_url(STORE_DB)
    worker_settings = Settings(redis_url=url, tools="agent:registry")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOL_BOUNDARY_")}
    env |= {"TOOL_BOUNDARY_REDIS_URL": url}

    # When a worker loads the tools as the README says, and the agent runs twice
    with celery_process(
        worker_settings,
        *worker_args("readme"),
        log=tmp_path / "worker.log",
        extra_env={"PYTHONPATH": str(tmp_path)},
    ):
        runs = [
            subprocess.run(
                [sys.executable, "agent.py"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            for _ in range(2)
        ]

    # Then each run prints what the README shows, and the two runs made their own records
    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.splitlines() == shown
    keys = [
        key.decode() if isinstance(key, bytes) else key
        for key in redis_client.scan_iter("tb:{run-*}:call:*")
    ]
    assert len(keys) == 4
    runs_seen = {key.split("}")[0] for key in keys}
    assert len(runs_seen) == 2
