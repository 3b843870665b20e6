"""What every answer of the web view carries and what a user reads after an action: its
security headers (401s and redirects too), a login redirect that stays on this server, proper
404 pages, a bounded tool filter, what a cancel did, and a call's page that tells its last
change, its time limit and where a cancelled call stopped."""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from boundary import (
    CanonicalKey,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.dispatch import InProcessDispatcher
from tasks.web.app import create_app
from tasks.web.headers import CONTENT_SECURITY_POLICY
from tests.support.celery_tools import TEST_TIMEOUT_S, registry
from tests.web.server import Answer, Served, fetch, serving

RUN = RunContext(run_id="answers-run", authorized_tools=frozenset(s.name for s in registry))
TOKEN = "answers-token-8080-xyz"


class HeldDispatcher:
    """Records calls and never runs them: they stay PROJECTING for the test."""

    def dispatch(self, key: CanonicalKey) -> None:
        return None

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


def held_boundary(store: RedisCanonicalStore) -> ToolBoundary:
    return ToolBoundary(store=store, registry=registry, dispatcher=HeldDispatcher())


def time_limit(tool: str) -> float | None:
    spec = registry.get(tool)
    return None if spec is None else spec.timeout_s


@pytest.fixture
def web(store: RedisCanonicalStore) -> Iterator[Served]:
    app = create_app(store, canceller=held_boundary(store).cancel, time_limit=time_limit)
    with serving(app) as served:
        yield served


def submit(boundary: ToolBoundary, call_id: str, tool: str = "lookup") -> CanonicalKey:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments={"query": "q"}
    )
    assert boundary.submit(envelope, RUN).accepted
    return CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)


def assert_secured(answer: Answer, where: str) -> None:
    headers = {k.lower(): v for k, v in answer.headers.items()}
    policy = headers.get("content-security-policy", "")
    assert policy == CONTENT_SECURITY_POLICY, where
    assert "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy, where
    assert headers.get("x-frame-options") == "DENY", where
    assert headers.get("x-content-type-options") == "nosniff", where
    assert headers.get("referrer-policy") == "no-referrer", where


def cancel_form(base: str, path: str, call_id: str) -> tuple[str, bytes]:
    page = fetch(base + path).body
    action = f"/runs/{RUN.run_id}/calls/{call_id}/cancel"
    form = page[page.index(f'action="{action}"') :]
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form)
    back = re.search(r'name="back" value="(\w+)"', form)
    assert csrf is not None and back is not None
    return base + action, f"csrf={csrf.group(1)}&back={back.group(1)}".encode()


def test_every_answer_carries_the_security_headers(store: RedisCanonicalStore) -> None:
    submit(held_boundary(store), "sec-1")
    app = create_app(store, canceller=held_boundary(store).cancel, token=TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with serving(app) as served:
        base = served.base
        for path in (
            "/",
            "/limits",
            f"/runs/{RUN.run_id}",
            f"/runs/{RUN.run_id}/calls/sec-1",
            "/static/style.css",
            "/static/live.js",
            "/no-such-page",
        ):
            assert_secured(fetch(base + path, headers=bearer), path)
        # A refused request and a login redirect too
        refused = fetch(base + "/")
        assert refused.status == 401
        assert_secured(refused, "401")
        login = fetch(f"{base}/?token={TOKEN}")
        assert login.status == 303
        assert_secured(login, "login")


def test_a_login_link_redirects_only_to_this_server(
    store: RedisCanonicalStore, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(store, token=TOKEN)
    with serving(app) as served:
        # A path that starts with two slashes would be another server's address
        login = fetch(f"{served.base}//evil.example/?token={TOKEN}")
        assert login.status == 303
        location = login.headers["location"]
        assert location == "/evil.example/", location
        # A CR/LF (and a backslash) in the path stays encoded: no header is split, no error
        with caplog.at_level(logging.DEBUG):
            login = raw_get(served, f"/a%0d%0aSet-Cookie:%20x=1/%5C%5Cb?token={TOKEN}")
        assert login.startswith("HTTP/1.1 303"), login[:200]
        headers = login.split("\r\n\r\n")[0].lower()
        assert "set-cookie: x=1" not in headers
        assert "location: /a%0d%0aset-cookie:%20x=1/%5c%5cb\r\n" in headers + "\r\n"
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.exc_info], caplog.text


def raw_get(served: Served, target: str) -> str:
    """One GET with the request target exactly as given (urllib would re-encode it)."""
    with socket.create_connection((served.host, served.port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("latin-1")


def test_unknown_addresses_are_html_pages_and_the_favicon_is_no_404(web: Served) -> None:
    for path in ("/nonexistent", "/runs/", "/runs/a%2Fb", "/runs/no-such-run"):
        answer = fetch(web.base + path)
        assert answer.status == 404, path
        assert answer.headers["content-type"].startswith("text/html"), path
        assert answer.body.startswith("<!doctype html>"), path
        assert "<h1>" in answer.body and 'href="/"' in answer.body, path
    assert fetch(web.base + "/favicon.ico").status == 204


def test_a_huge_tool_filter_is_refused_not_echoed(web: Served) -> None:
    huge = "x" * 70_000
    answer = fetch(f"{web.base}/?tool={huge}")
    assert answer.status == 400
    assert huge[:200] not in answer.body and len(answer.body) < 5_000
    assert fetch(f"{web.base}/?tool={'y' * 128}").status == 200


def test_after_cancel_the_page_says_what_happened(store: RedisCanonicalStore, web: Served) -> None:
    # Given a call in flight and one that already ended READY
    submit(held_boundary(store), "to-cancel")
    inline = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry, inline=True)
    )
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id="done", tool_name="lookup", arguments={"query": "q"}
    )
    assert inline.invoke(envelope, RUN, timeout=10).status is InvocationStatus.READY
    # When the first is cancelled from the run's page, and the second from its own page
    action, body = cancel_form(web.base, f"/runs/{RUN.run_id}", "to-cancel")
    answer = fetch(action, data=body)
    assert answer.status == 303
    # Then the page the browser goes back to says the call was cancelled
    after = fetch(web.base + answer.headers["location"].split("#")[0]).body
    assert 'Cancel: call <span class="id">to-cancel</span> was cancelled' in after
    # (its form is on the run's page, hidden: posted as a page loaded before it ended would)
    action, body = cancel_form(web.base, f"/runs/{RUN.run_id}", "done")
    answer = fetch(action, data=body)
    assert answer.status == 303
    after = fetch(web.base + answer.headers["location"].split("#")[0]).body
    assert "had already ended READY: nothing was cancelled" in after


def test_a_calls_page_tells_its_last_change_time_limit_and_where_it_stopped(
    store: RedisCanonicalStore, web: Served
) -> None:
    # Given a call whose tool started and then heartbeat with progress
    key = submit(held_boundary(store), "beating")
    assert store.claim(key, attempt=1, heartbeat_timeouts={}).record is not None
    time.sleep(0.01)
    store.heartbeat(key, attempt=1, progress=0.45, message="step 9 of 20", heartbeat_timeout_s=None)
    record = store.get(key)
    assert record is not None and record.heartbeat_at is not None
    assert record.heartbeat_at > record.updated_at
    # When its page is read
    page = fetch(f"{web.base}/runs/{RUN.run_id}/calls/beating").body
    # Then "updated" is its heartbeat, and the deadline names the tool's time limit
    assert f"<dt>updated</dt><dd>{record.heartbeat_at.isoformat()}</dd>" in page
    assert f"the tool's time limit {TEST_TIMEOUT_S:g}s per attempt" in page
    # And the page follows the call live
    assert 'data-call="beating"' in page and "/static/live.js" in page
    # When it is cancelled
    action, body = cancel_form(web.base, f"/runs/{RUN.run_id}/calls/beating", "beating")
    assert fetch(action, data=body).status == 303
    page = fetch(f"{web.base}/runs/{RUN.run_id}/calls/beating").body
    # Then its page says where it stopped
    assert "<dt>stopped at</dt><dd>attempt 1: 45 %, step 9 of 20 (last heartbeat" in page
