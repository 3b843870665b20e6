"""The docs' account of the demo (docs/getting-started/demo.md) counts what the demo does:
its quick calls (``SCRIPT``) and its long ones (``LONG_SCRIPT``); it said three long ones when
the demo made five."""

from __future__ import annotations

import re
from pathlib import Path

from tasks.demo.long_calls import LONG_SCRIPT
from tasks.demo.script import SCRIPT

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started" / "demo.md"
NUMBERS = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def test_the_demo_page_counts_the_demos_quick_and_long_calls() -> None:
    text = " ".join(PAGE.read_text().split())
    said = re.search(r"makes (\w+) quick tool calls in one run, then (\w+) long ones", text)
    assert said is not None
    quick, long = (NUMBERS[word] for word in said.groups())
    assert (quick, long) == (len(SCRIPT), len(LONG_SCRIPT))
