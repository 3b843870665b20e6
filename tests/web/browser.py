"""Playwright driving the system's Chromium (Debian's ``chromium``: Playwright cannot download
its own browsers here, so it is launched through ``executable_path``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.support.servers import CI

#: Where Debian installs Chromium (``apt-get install chromium``; ``.ci/run`` does). Missing, the
#: browser tests skip with one line saying so, and fail when ``CI`` is set.
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


def missing() -> str | None:
    """What the browser tests lack to run, in one line, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the browser tests need playwright (the browser-tests extra, in dev)"
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return (
            f"the browser tests need Chromium at {CHROMIUM}: install it first "
            "(apt-get install chromium), or set TB_TEST_CHROMIUM to a Chromium binary"
        )
    return None


def require_chromium() -> None:
    """At a browser test module's import: skips the whole module with one line when Chromium
    or Playwright is missing, unless ``CI`` is set (then each test fails, in ``chromium``)."""
    problem = missing()
    if problem is not None and not CI:
        pytest.skip(problem, allow_module_level=True)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's sync API)."""
    problem = missing()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()
