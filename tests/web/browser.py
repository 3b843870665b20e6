"""Playwright driving the system's Chromium (Debian's ``chromium``: Playwright cannot download
its own browsers here, so it is launched through ``executable_path``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.servers import CI

#: Where Debian installs Chromium (``apt-get install chromium``; ``.ci/run`` does).
CHROMIUM = os.environ.get("TB_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _missing(what: str) -> None:
    if CI:
        pytest.fail(f"{what} is missing")
    pytest.skip(f"{what} is missing")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's sync API)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright (the browser-tests extra)")
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        _missing(f"Chromium at {CHROMIUM}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()
