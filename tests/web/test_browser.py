"""The web view in a real browser (Chromium through Playwright) over a real Celery worker: a
live run's progress moves without a reload, cancel works without JavaScript and stops the
tool, and the pages fit a phone and a laptop at 80 % zoom."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boundary import ErrorCode, InvocationStatus, ToolBoundary, ToolCallEnvelope
from tasks.runtime import get_runtime
from tasks.settings import redis_location
from tasks.web.app import create_app
from tests.celery.conftest import RUN
from tests.support.helpers import wait_until
from tests.web.browser import chromium, require_chromium
from tests.web.server import Served, serving

require_chromium()

#: Longest any browser wait may take, milliseconds (a loaded machine).
WAIT_MS = 30_000
#: A laptop's screen at 80 % zoom: 1366 x 768 device pixels show 1708 x 960 CSS pixels.
LAPTOP_AT_80 = {"width": 1708, "height": 960}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def web(celery_boundary: ToolBoundary) -> Iterator[Served]:
    app = create_app(
        celery_boundary.store,
        canceller=celery_boundary.cancel,
        store_label=redis_location(get_runtime().settings.store_url),
    )
    with serving(app) as served:
        yield served


def start(boundary: ToolBoundary, call_id: str, **arguments: Any) -> None:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name="beating_long", arguments=arguments
    )
    assert boundary.submit(envelope, RUN).accepted


def progress_of(page: Any, call_id: str) -> int:
    return int(page.eval_on_selector(f'[id="call-{call_id}"] progress', "el => el.value"))


def test_a_running_calls_progress_rises_without_a_reload(
    celery_boundary: ToolBoundary, web: Served, browser: Any, tmp_path: Path
) -> None:
    # Given a call that reports progress for about 8 s (its time limit is 9 s)
    start(celery_boundary, "web-live", steps=40, step_s=0.2)
    page = browser.new_page(viewport=LAPTOP_AT_80)
    try:
        # When its run's page is open
        page.goto(f"{web.base}/runs/{RUN.run_id}")
        page.evaluate("window.__notReloaded = true")
        bar = '[id="call-web-live"] progress'
        page.wait_for_function(f"() => document.querySelector('{bar}').value > 0", timeout=WAIT_MS)
        first = progress_of(page, "web-live")
        # Then the bar rises as the tool reports, with its message, and the page never reloads
        page.wait_for_function(
            f"() => document.querySelector('{bar}').value > {first}", timeout=WAIT_MS
        )
        assert progress_of(page, "web-live") > first
        assert page.evaluate("window.__notReloaded") is True
        message = page.text_content('[id="call-web-live"] [data-field="message"]')
        assert message is not None and message.startswith("step ")
        assert page.is_visible("#live-note")
        shot = tmp_path / "web-run.png"
        page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("TB_WEB_SCREENSHOT"):
            page.screenshot(path=os.environ["TB_WEB_SCREENSHOT"], full_page=True)
        assert shot.stat().st_size > 0
        # And a call that ends shows its end without a reload too
        celery_boundary.cancel(RUN.run_id, "web-live")
        status = '[id="call-web-live"] [data-field="status"]'
        page.wait_for_function(
            f"() => document.querySelector('{status}').textContent === 'ERROR'", timeout=WAIT_MS
        )
        assert page.is_hidden('[id="call-web-live"] progress')
        assert page.evaluate("window.__notReloaded") is True
    finally:
        page.close()


def test_cancel_works_without_javascript_and_the_tool_stops(
    celery_boundary: ToolBoundary, web: Served, browser: Any, tmp_path: Path
) -> None:
    # Given a long call running (each step leaves a file; it writes why it left at its end)
    steps = tmp_path / "steps"
    steps.mkdir()
    start(celery_boundary, "web-cancel", steps=80, step_s=0.1, dir=str(steps))
    deadline = time.monotonic() + WAIT_MS / 1000
    wait_until((steps / "web-cancel-1-2").exists, "the tool to start", WAIT_MS / 1000, every=0.1)
    context = browser.new_context(java_script_enabled=False, viewport=PHONE)
    page = context.new_page()
    try:
        # When its Cancel button is pressed on the run's page, in a browser without JavaScript
        page.goto(f"{web.base}/runs/{RUN.run_id}")
        page.click('[id="call-web-cancel"] form.cancel button')
        page.wait_for_load_state()
        # Then the page that comes back shows it ended CANCELLED
        assert page.url.endswith(
            f"/runs/{RUN.run_id}?cancel=CANCELLED&call=web-cancel#cancel-notice"
        )
        assert "web-cancel was cancelled" in (page.text_content("#cancel-notice") or "")
        row = '[id="call-web-cancel"]'
        assert page.text_content(f'{row} [data-field="status"]') == "ERROR"
        assert page.text_content(f'{row} [data-field="detail"]') == "CANCELLED"
        assert page.is_hidden(f"{row} form.cancel")
    finally:
        context.close()
    # And the record says so, and the tool stopped at its next heartbeat
    outcome = celery_boundary.outcome(RUN.run_id, "web-cancel", timeout=1)
    assert outcome.status is InvocationStatus.ERROR
    assert outcome.error_code is ErrorCode.CANCELLED
    exit_file = steps / "web-cancel-1-exit"
    wait_until(exit_file.exists, "the tool to stop", deadline + 30 - time.monotonic(), every=0.1)
    assert exit_file.read_text() == "cancelled"
    ran = len(list(steps.glob("web-cancel-1-[0-9]*")))
    assert ran < 80


def test_no_page_can_be_framed_and_no_page_breaks_its_policy(
    celery_boundary: ToolBoundary, web: Served, browser: Any
) -> None:
    # Given a run with a call in flight (its page runs the live script)
    start(celery_boundary, "web-frame", steps=40, step_s=0.2)
    context = browser.new_context(viewport=LAPTOP_AT_80)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        # When every page is loaded, with its script and stylesheet
        for path in (
            "/",
            "/limits",
            f"/runs/{RUN.run_id}",
            f"/runs/{RUN.run_id}/calls/web-frame",
        ):
            page.goto(web.base + path)
            page.wait_for_load_state("load")
        page.goto(f"{web.base}/runs/{RUN.run_id}")
        page.wait_for_selector("#live-note:not([hidden])", timeout=WAIT_MS)
        # Then nothing was refused by the pages' Content-Security-Policy, nothing failed (not
        # even the favicon the browser asks for)
        assert not [p for p in problems if "Content Security Policy" in p], problems
        assert not [p for p in problems if "404" in p], problems
        # When a page of another origin (another port of this host) frames the run's page
        framer = f"http://127.0.0.1:{web.port + 1}/framer"
        page.route(
            framer,
            lambda route: route.fulfill(
                content_type="text/html",
                body=f'<!doctype html><iframe id="f" src="{web.base}/runs/{RUN.run_id}"></iframe>',
            ),
        )
        page.goto(framer)
        page.wait_for_load_state("load")
        # Then the browser refused to show it: the frame holds no page of the web view
        frames = [f for f in page.frames if f != page.main_frame]
        assert len(frames) == 1
        content = frames[0].content()
        assert "Cancel" not in content and "tool-boundary" not in content
        assert frames[0].url.startswith("chrome-error://"), frames[0].url
    finally:
        context.close()
        celery_boundary.cancel(RUN.run_id, "web-frame")


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP_AT_80], ids=["phone", "laptop-80%"])
def test_every_page_fits_the_width_without_javascript(
    celery_boundary: ToolBoundary, web: Served, browser: Any, viewport: dict[str, int]
) -> None:
    # Given a run with a finished call and one in flight
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id="web-fit-done", tool_name="lookup", arguments={"query": "q"}
    )
    assert celery_boundary.invoke(envelope, RUN, timeout=30).status is InvocationStatus.READY
    start(celery_boundary, "web-fit-running", steps=40, step_s=0.2)
    context = browser.new_context(java_script_enabled=False, viewport=viewport)
    page = context.new_page()
    try:
        for path in (
            "/",
            f"/runs/{RUN.run_id}",
            f"/runs/{RUN.run_id}/calls/web-fit-done",
            f"/runs/{RUN.run_id}/calls/web-fit-running",
        ):
            page.goto(web.base + path)
            # Then nothing is wider than the window, and the text is at a readable size
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= viewport["width"], (path, width)
            size = page.evaluate("parseFloat(getComputedStyle(document.body).fontSize)")
            assert size >= 14, (path, size)
        page.goto(f"{web.base}/runs/{RUN.run_id}")
        assert page.is_visible('[id="call-web-fit-done"]')
    finally:
        context.close()
        celery_boundary.cancel(RUN.run_id, "web-fit-running")
