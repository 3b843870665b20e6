"""The fenced code blocks of README.md and docs/, and the markers that say how the suite
treats a Python block (``docs/contributing.md``, "The docs"):

- ``<!-- docs-test: skip: REASON -->`` on the line right before a block (blank lines
  between allowed): the block is not run, and says why (on a shell block it just says why);
- ``<!-- docs-test: setup`` ... ``-->``: Python run at that point of the page, before the
  blocks after it (names an example takes for granted; invisible on the site).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Fence languages that are Python.
PYTHON = {"python", "py", "python3"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*$")
SKIP = re.compile(r"^<!-- docs-test: skip:(?P<reason>.*?)-->\s*$")
SETUP_START = re.compile(r"^<!-- docs-test: setup\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block, or one setup comment (``lang == "setup"``)."""

    path: Path
    line: int  # 1-based line of its opening fence
    lang: str
    code: str
    skip: str | None  # the reason given, when marked skip

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def is_python(self) -> bool:
        return self.lang in PYTHON or self.lang == "setup"


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The page's fenced blocks and setup comments, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    skip: str | None = None
    row = 0
    while row < len(lines):
        text = lines[row]
        if (marker := SKIP.match(text.strip())) is not None:
            skip = marker["reason"].strip()
            row += 1
            continue
        if SETUP_START.match(text.strip()):
            end = row + 1
            while lines[end].strip() != "-->":
                end += 1
            setup = "\n".join(lines[row + 1 : end])
            found.append(Block(path, row + 1, "setup", setup, None))
            row = end + 1
            continue
        if (fence := FENCE.match(text)) is not None:
            indent = fence["indent"]
            end = row + 1
            while lines[end].strip() != "```":
                end += 1
            body = [
                line[len(indent) :] if line.startswith(indent) else line
                for line in lines[row + 1 : end]
            ]
            found.append(Block(path, row + 1, fence["lang"], "\n".join(body) + "\n", skip))
            skip = None
            row = end + 1
            continue
        if text.strip() and skip is not None:
            raise ValueError(
                f"{path}:{row + 1}: a docs-test skip marker must come right before a block"
            )
        row += 1
    return found
