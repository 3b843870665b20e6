"""The web view over HTTP (a real uvicorn, a real Redis with a password): what its pages and
live streams show, and what they never show; the token; the cancel form's CSRF check."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boundary import (
    CanonicalKey,
    ConfigurationError,
    ErrorCode,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.dispatch import InProcessDispatcher
from tasks.settings import Settings
from tasks.web.feed import RunFeeds
from tasks.web.server import build_app, web_token
from tests.support.celery_tools import SECRET, STACK, registry
from tests.support.servers import RedisServer, redis_server
from tests.web.server import fetch, first_event, serving

#: The store's and the broker's Redis password: never on a page.
PASSWORD = "pw-Zq81-web-secret"
#: Fragments of what was planted in raw responses and exception texts.
PLANTED = (SECRET, "hunter2-pass", "10.9.8.7", "Traceback", STACK.splitlines()[1].strip())
RUN = RunContext(run_id="web-run", authorized_tools=frozenset(spec.name for spec in registry))
TOKEN = "web-token-4242-abcdef"


class HeldDispatcher:
    """Records calls and never runs them: they stay PROJECTING for the test."""

    def dispatch(self, key: CanonicalKey) -> None:
        return None

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


@pytest.fixture
def secret_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis", password=PASSWORD) as server:
        yield server


def settings_for(server: RedisServer) -> Settings:
    url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    return Settings(
        redis_url=url,
        broker_url=url.replace("/0", "/1"),
        tools="tests.support.celery_tools:registry",
    )


def store_url(server: RedisServer) -> str:
    return settings_for(server).store_url


def store_for(server: RedisServer) -> RedisCanonicalStore:
    return RedisCanonicalStore.from_url(settings_for(server).store_url, ttl_s=600)


def make_calls(store: RedisCanonicalStore) -> None:
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry, inline=True)
    )
    calls = {
        "leak-raw": ("leaky", {"note": "x"}),
        "leak-tool-exc": ("boom", {"q": "x"}),
        "leak-projector-exc": ("bad_projector", {"query": "x"}),
        "plain": ("lookup", {"query": "ok"}),
    }
    for call_id, (tool, arguments) in calls.items():
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
        )
        boundary.invoke(envelope, RUN, timeout=10)


def every_view(base: str) -> str:
    """Every page of the run, and the first event of its live stream, as one text."""
    paths = [
        "/",
        "/?status=ERROR",
        "/?tool=leaky",
        "/?status=READY&tool=lookup",
        f"/runs/{RUN.run_id}",
    ]
    paths += [
        f"/runs/{RUN.run_id}/calls/{call}"
        for call in ("leak-raw", "leak-tool-exc", "leak-projector-exc", "plain")
    ]
    texts = []
    for path in paths:
        answer = fetch(base + path)
        assert answer.status == 200, (path, answer.status)
        texts.append(answer.body)
    texts.append(first_event(f"{base}/runs/{RUN.run_id}/events"))
    return "\n".join(texts)


def assert_clean(text: str, where: str) -> None:
    for fragment in (*PLANTED, PASSWORD):
        at = text.find(fragment)
        assert at < 0, f"{fragment!r} leaked into {where}: ...{text[max(0, at - 200) : at + 80]}"


def test_no_raw_response_exception_text_or_password_on_any_page_or_stream(
    secret_redis: RedisServer,
) -> None:
    # Given calls whose raw response and tool and projector exceptions hold secrets, in a
    # store (and a broker) behind a password
    store = store_for(secret_redis)
    make_calls(store)
    settings = settings_for(secret_redis)
    # When every page and the live stream are read from a server without --show-raw
    with serving(build_app(settings, show_raw=False, token=None)) as served:
        text = every_view(served.base)
    # Then none of it shows, while the pages do show the calls and their codes
    assert_clean(text, "the web view")
    for shown in ("leak-raw", "TOOL_EXECUTION_FAILED", "PROJECTION_FAILED", "EVIDENCE_FOUND"):
        assert shown in text
    assert "Not shown: this server was not started with --show-raw" in text
    assert f"127.0.0.1:{secret_redis.port}/0" in text  # where the store is, without its password

    # When the server shows raw responses (an operator's --show-raw)
    with serving(build_app(settings, show_raw=True, token=None)) as served:
        raw_page = fetch(f"{served.base}/runs/{RUN.run_id}/calls/leak-raw").body
        others = every_view(served.base).replace(raw_page, "")
    # Then the raw response is on its call's page, and only there
    assert SECRET in raw_page
    assert_clean(others, "the web view's other pages with --show-raw")


def test_a_store_that_fails_is_a_503_page_without_its_url(secret_redis: RedisServer) -> None:
    settings = settings_for(secret_redis)
    with serving(build_app(settings, show_raw=False, token=None)) as served:
        secret_redis.stop()
        for path in ("/", f"/runs/{RUN.run_id}", f"/runs/{RUN.run_id}/calls/c1"):
            answer = fetch(served.base + path)
            assert answer.status == 503, path
            assert "STORE_UNAVAILABLE" in answer.body
            assert_clean(answer.body, path)
        event = json.loads(first_event(f"{served.base}/runs/{RUN.run_id}/events"))
        assert event == {"error": "STORE_UNAVAILABLE"}


def test_beyond_loopback_the_token_is_required(
    secret_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a token a server refuses to bind beyond loopback (the command: one line, exit 2)
    monkeypatch.delenv("TOOL_BOUNDARY_WEB_TOKEN", raising=False)
    with pytest.raises(ConfigurationError):
        web_token("0.0.0.0")
    assert web_token("127.0.0.1") is None
    done = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "web", "--host", "0.0.0.0", "--port", "1"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin", "TOOL_BOUNDARY_REDIS_URL": store_url(secret_redis)},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("error: serving on 0.0.0.0 needs TOOL_BOUNDARY_WEB_TOKEN")
    assert len(done.stderr.splitlines()) == 1 and PASSWORD not in done.stderr
    # Given a server on every interface with a token
    monkeypatch.setenv("TOOL_BOUNDARY_WEB_TOKEN", TOKEN)
    store = store_for(secret_redis)
    make_calls(store)
    app = build_app(settings_for(secret_redis), show_raw=False, token=web_token("0.0.0.0"))
    with serving(app, host="0.0.0.0") as served:
        base = served.base
        paths = ["/", f"/runs/{RUN.run_id}", f"/runs/{RUN.run_id}/events", "/static/style.css"]
        # Then a request without it gets 401, pages, stream, stylesheet and cancel alike
        for path in paths:
            assert fetch(base + path).status == 401, path
        cancel = f"{base}/runs/{RUN.run_id}/calls/plain/cancel"
        assert fetch(cancel, data=b"csrf=x").status == 401
        wrong = fetch(f"{base}/?token=not-it", headers={"Authorization": "Bearer not-it"})
        assert wrong.status == 401 and TOKEN not in wrong.body
        # And the bearer token opens every page
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert all(
            fetch(base + p, headers=bearer).status == 200 for p in paths if "events" not in p
        )
        # And a login link sets a cookie (not the token) and drops the token from the URL
        login = fetch(f"{base}/runs/{RUN.run_id}?token={TOKEN}&x=1")
        assert login.status == 303
        assert login.headers["location"] == f"/runs/{RUN.run_id}?x=1"
        cookie = login.headers["set-cookie"].split(";")[0]
        assert TOKEN not in cookie and "HttpOnly" in login.headers["set-cookie"]
        assert fetch(base + "/", headers={"Cookie": cookie}).status == 200
        assert fetch(base + "/", headers={"Cookie": cookie + "x"}).status == 401


def test_cancel_needs_the_forms_csrf_token_and_ends_the_call_cancelled(
    secret_redis: RedisServer,
) -> None:
    # Given a call in flight (its dispatcher never runs it)
    store = store_for(secret_redis)
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=HeldDispatcher())
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id="held-1", tool_name="lookup", arguments={"query": "q"}
    )
    assert boundary.submit(envelope, RUN).accepted
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="held-1")
    with serving(build_app(settings_for(secret_redis), show_raw=False, token=None)) as served:
        page = fetch(f"{served.base}/runs/{RUN.run_id}").body
        action = f"/runs/{RUN.run_id}/calls/held-1/cancel"
        assert f'action="{action}"' in page
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None
        # When the form is posted without its token, or with another call's
        for body in (b"back=run", b"csrf=" + b"0" * 64):
            refused = fetch(served.base + action, data=body)
            assert refused.status == 403
        # Then nothing changed
        record = store.get(key)
        assert record is not None and record.status is InvocationStatus.PROJECTING
        # When it is posted as the page has it
        done = fetch(served.base + action, data=f"csrf={csrf.group(1)}&back=run".encode())
        # Then the call ends CANCELLED and the browser goes back to the run
        assert done.status == 303
        assert done.headers["location"] == (
            f"/runs/{RUN.run_id}?cancel=CANCELLED&call=held-1#cancel-notice"
        )
    record = store.get(key)
    assert record is not None and record.error_code is ErrorCode.CANCELLED


def test_browsers_on_one_run_share_one_reader() -> None:
    reads: list[str] = []

    def read(run_id: str) -> list[dict[str, Any]]:
        reads.append(run_id)
        return [{"state": "running", "n": len(reads)}]

    async def watch() -> tuple[int, list[str]]:
        feeds = RunFeeds(read, live_interval_s=0.05)
        streams = [await feeds.stream("run-a") for _ in range(3)]
        firsts = [await anext(s) for s in streams]
        readers = len(feeds._feeds)
        for stream in streams:
            await stream.aclose()  # type: ignore[attr-defined]
        await feeds.aclose()
        return readers, firsts

    readers, firsts = asyncio.run(watch())
    assert readers == 1
    assert all(first.startswith("event: calls\ndata: ") for first in firsts)
    assert set(reads) == {"run-a"}


def test_limited_tools_waiting_calls_and_the_limits_page(secret_redis: RedisServer) -> None:
    # Given "held_slot" (one at once) with its slot held and two calls waiting, one of them of
    # another tenant
    store = store_for(secret_redis)
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=HeldDispatcher())
    other = RUN.model_copy(update={"run_id": "web-run-b", "tenant": "beta"})
    for run, call_id in ((RUN, "h1"), (RUN, "h2"), (other, "h3")):
        envelope = ToolCallEnvelope(
            run_id=run.run_id, tool_call_id=call_id, tool_name="held_slot", arguments={}
        )
        assert boundary.submit(envelope, run).accepted
    settings = settings_for(secret_redis)
    with serving(build_app(settings, show_raw=False, token=None)) as served:
        run_page = fetch(f"{served.base}/runs/{RUN.run_id}").body
        limits = fetch(f"{served.base}/limits")
        other_call = fetch(f"{served.base}/runs/{other.run_id}/calls/h3").body
    # Then the run's waiting call says so, with the calls ahead of it
    assert "waiting for a slot (0 ahead)" in run_page
    # And the limits page lists the tool: one running, two waiting, by tenant
    assert limits.status == 200
    row = limits.body[limits.body.index("held_slot") :]
    assert "concurrency 1" in row
    assert re.search(r'data-label="running">1<', row) and re.search(r'data-label="waiting">2<', row)
    assert "beta: 1" in row and "(shared): 1" in row
    assert "waiting for a slot" in other_call
    # And the fleet's own entry, the cap of re-projection chunks, is listed with its default,
    # though no chunk has used it (as ``tool-boundary limits`` lists it)
    cap = limits.body[limits.body.index("tool_boundary.reproject") :]
    assert f"concurrency {settings.reproject_concurrency}" in cap
    assert_clean(limits.body, "the limits page")
