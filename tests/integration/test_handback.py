"""A hand-back (``boundary.handback``) on a real store: the running attempt is given up
(fenced), counted in the record and the metric, and the next attempt sent at once; a drain
ends only the execute steps' in-line runs (``Watchdog.end_now``)."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from boundary import CanonicalKey, handback
from boundary.call_context import CallCancelled, CallScope
from boundary.steps.attempts import AttemptTerms
from boundary.store.base import WriteStatus
from boundary.store.redis import RedisCanonicalStore
from boundary.tool_threads import Watchdog
from tasks.cli.main import cli
from tests.conftest import STORE_DB, redis_url
from tests.support import otel
from tests.support.helpers import create_projecting


@pytest.fixture(autouse=True)
def _forget_drain() -> Any:
    handback.reset()
    yield
    handback.reset()


def _running(store: RedisCanonicalStore) -> tuple[CanonicalKey, CallScope]:
    key = create_projecting(store, "long")
    claim = store.claim(key, attempt=1, heartbeat_timeouts={})
    assert claim.record is not None
    scope = CallScope(store, key, tool_name="search", attempt=1, time_limit_s=60)
    return key, scope


def test_a_hand_back_gives_the_attempt_up_counts_it_and_sends_the_next(
    store: RedisCanonicalStore,
) -> None:
    otel.install()
    before = otel.count("tool_boundary.handbacks", tool="search")
    key, scope = _running(store)
    sent: list[int] = []

    class Sender:
        def send_attempt(
            self, key: CanonicalKey, *, attempt: int, queue: str, countdown_s: float = 0.0
        ) -> None:
            sent.append(attempt)

    terms = AttemptTerms(sender=Sender(), max_pending_s=60, reap_grace_s=1)

    def hand_back() -> WriteStatus | None:
        return handback.hand_back(store, key, None, scope, terms)

    assert hand_back() is None  # handed back

    assert sent == [2]
    record = store.get(key, with_raw=False)
    assert record is not None and (record.attempt, record.handbacks) == (2, 1)
    assert record.started_at is None  # the next attempt has not started
    state = store.attempt_state(key)
    assert state is not None and state.tool_runs == 1  # not counted against the retry policy
    assert handback.handed_back(key, 1) and not handback.handed_back(key, 2)
    assert otel.count("tool_boundary.handbacks", tool="search") - before == 1
    # The old attempt's tool is told at its next heartbeat
    with pytest.raises(CallCancelled):
        scope.beat()
    # And a second hand-back of the same attempt changes nothing (fenced)
    assert hand_back() is WriteStatus.SUPERSEDED and sent == [2]


def test_a_drain_ends_only_the_runs_marked_drainable() -> None:
    ended: list[str] = []
    done = threading.Event()

    class Host:
        def replace(self) -> None:
            pass

        def retire(self) -> None:
            pass

    def plain() -> None:
        ended.append("plain")

    @handback.drainable
    def marked() -> None:
        ended.append("marked")
        done.set()

    watchdog = Watchdog(lambda run: run.on_overdue())
    far = time.monotonic() + 600
    watchdog.watch(far, plain, Host())
    watchdog.watch(far, marked, Host())

    assert watchdog.end_now(handback.is_drainable) == 1
    assert done.wait(10)
    time.sleep(0.2)
    assert ended == ["marked"]


def test_show_prints_the_hand_backs(
    store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, scope = _running(store)
    # A process without a sender moves the attempt on all the same (the reaper sends it)
    terms = AttemptTerms(sender=None, max_pending_s=60, reap_grace_s=1)
    assert handback.hand_back(store, key, None, scope, terms) is None
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", redis_url(STORE_DB))
    shown = CliRunner().invoke(cli, ["show", key.run_id, key.tool_call_id, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["handbacks"] == 1
    table = CliRunner().invoke(cli, ["show", key.run_id, key.tool_call_id])
    assert re.search(r"handbacks\s+1", table.output), table.output
