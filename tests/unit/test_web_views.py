"""What the web view says of a call's state, without a store: a call flow control holds is
"waiting for a slot (N ahead)", a started one runs with its bar, a sent one is queued."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import fakeredis

from boundary import CallProgress, CanonicalRecord, InvocationStatus, RedisCanonicalStore
from tasks.web.app import WebView
from tasks.web.pages import call_state

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def record(**fields: Any) -> CanonicalRecord:
    values: dict[str, Any] = {
        "run_id": "r",
        "tool_call_id": "c",
        "tool_name": "report",
        "status": InvocationStatus.PROJECTING,
        "request": "{}",
        "seq": 1,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return CanonicalRecord(**(values | fields))


def test_the_state_of_a_call_in_flight() -> None:
    waiting = CallProgress(attempt=1, waiting=True, ahead=3)
    assert call_state(record(), waiting) == ("waiting", 3)
    assert call_state(record(), None) == ("queued", None)
    started = record(started_at=NOW, progress=0.5)
    assert call_state(started, CallProgress.of(started)) == ("running", None)
    assert call_state(record(status=InvocationStatus.READY), None) == ("done", None)


def test_a_waiting_call_reads_waiting_for_a_slot_with_the_calls_ahead() -> None:
    store = RedisCanonicalStore(client=fakeredis.FakeRedis(decode_responses=True), ttl_s=60)
    view = WebView(store, canceller=None, show_raw=False, store_label="")
    macro = view.templates.get_template("_state.html").module.state  # type: ignore[attr-defined]
    row = {"state": "waiting", "ahead": 3, "fraction": None, "message": None}
    html = str(macro(row))
    assert "waiting for a slot (3 ahead)" in html
    assert 'class="bar" hidden' in html
    running = str(
        macro(row | {"state": "running", "ahead": None, "fraction": 0.25, "message": "p"})
    )
    assert 'value="250"' in running and "waiting" not in running
    assert 'class="bar">' in running
    # A running call that reported no fraction yet shows its message, not an empty bar
    unknown = str(macro(row | {"state": "running", "ahead": None, "fraction": None}))
    assert 'class="bar" hidden' in unknown
