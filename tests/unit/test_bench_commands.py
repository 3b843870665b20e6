"""Every ``python -m bench...`` the README, bench/README.md and the docs quote names a module
that exists (the bench's modules live in ``bench.suite``, ``bench.peers``, ``bench.rig``,
``bench.studies`` and ``bench.reports``; no old name is kept as an alias)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quoted_modules() -> set[str]:
    texts = [ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").rglob("*.md")]
    found: set[str] = set()
    for path in texts:
        found |= set(re.findall(r"python -m (bench(?:\.[a-z0-9_]+)*)", path.read_text()))
    return found


def test_every_module_the_docs_run_exists() -> None:
    quoted = quoted_modules()
    assert "bench.studies.ceiling" in quoted
    missing = [name for name in sorted(quoted) if importlib.util.find_spec(name) is None]
    assert missing == []
