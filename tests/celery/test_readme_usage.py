"""The README's "Using it" runs as written: its two files are extracted, a real worker loads
the tools by ``TOOL_BOUNDARY_TOOLS`` and ``PYTHONPATH``, and the agent program runs twice
against one Redis (store, broker and result backend), each run with its own ids."""

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

#: A fenced Python block of the README whose first line names its file: ``# name.py: ...``.
FILE_BLOCK = re.compile(r"```python\n# (?P<name>[\w]+\.py):[^\n]*\n(?P<body>.*?)```", re.S)


def usage_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Using it")
    return text[start : text.index("\n## ", start + 1)]


def readme_files() -> dict[str, str]:
    return {
        match["name"]: f"# {match['name']}\n{match['body']}"
        for match in FILE_BLOCK.finditer(usage_section())
    }


def test_the_readme_shows_both_files_and_how_to_run_them() -> None:
    files = readme_files()
    assert set(files) == {"my_tools.py", "agent.py"}
    section = usage_section()
    assert "ToolRegistry()" in files["my_tools.py"]
    for needed in ("TOOL_BOUNDARY_TOOLS=my_tools:registry", "PYTHONPATH=.", ".venv/bin/celery"):
        assert needed in section


def test_the_readme_program_runs_twice_against_a_real_worker(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    # Given the README's files, and one Redis URL for store, broker and result backend
    for name, body in readme_files().items():
        (tmp_path / name).write_text(body)
    url = redis_url(STORE_DB)
    worker_settings = Settings(redis_url=url, tools="my_tools:registry")
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

    # Then each run prints what the README says it prints
    run_ids = set()
    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.splitlines()
        assert lines[0] == (
            "call_0 READY EVIDENCE_FOUND {'count': 2, 'latest': 'upstream timeout 03:40'}"
        )
        assert lines[1] == "call_1 READY NO_EVIDENCE None"
        run_id, summary = lines[2].split(": ", 1)
        assert summary == "2 facts, excluded {}"
        run_ids.add(run_id)
    assert len(run_ids) == 2
