"""The whole call path against a Redis set up as managed services leave it: TLS only (client
certificates required), the shipped ACL users (default user off), KEYS, MONITOR and DEBUG
renamed away and CONFIG refused to every role by the ACL. A threads worker seals READY and
ERROR, a turn (sync and async: the asyncio seal subscription over mutual TLS), a long tool
reports progress and stops at the operator's cancel, the reaper retries a lost call; Redis's
command stats (reset by the tests' admin before the worker starts) show that no product path
sent CONFIG, KEYS, MONITOR, DEBUG, SCRIPT FLUSH or CLIENT KILL, and its ACL log that no role
was refused.

CONFIG stays a command (refused, not renamed): a refused call is counted in its command stat
(``rejected_calls``) and logged by ACL LOG, where a renamed-away one would only be an ``ERR``
among the others (redis-py's ``CLIENT SETINFO``, unknown to Redis 7.0, is one per connection);
and the tests' admin resets the stats with it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boundary import (
    CanonicalKey,
    CanonicalRecord,
    ErrorCode,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from tasks import CeleryDispatcher
from tasks.wiring.app import create_app
from tests.conftest import celery_test_settings
from tests.support.celery_tools import registry
from tests.support.helpers import wait_until
from tests.tls.certs import Certificates
from tests.tls.servers import TlsRedisServer, Users, add_user, role_rules, tls_server
from tests.tls.stack import caller, role_settings, worker

#: The module's server and worker are its own: its tests share one xdist worker.
pytestmark = pytest.mark.xdist_group("tls-managed")

#: What managed services rename or refuse (renamed away here; the rest refused by the ACL).
RENAMED = ("KEYS", "MONITOR", "DEBUG")
#: ``INFO commandstats`` entries no product path may have.
NEVER_SENT = ("config", "keys", "monitor", "debug", "script|flush", "client|kill", "flushdb")
RUN = RunContext(
    run_id="run-managed",
    authorized_tools=frozenset({"lookup", "boom", "beating"}),
)


@pytest.fixture(scope="module")
def managed(
    tmp_path_factory: pytest.TempPathFactory, tls_certs: Certificates, tls_users: Users
) -> Iterator[TlsRedisServer]:
    renames = [arg for name in RENAMED for arg in ("--rename-command", name, "")]
    with tls_server(tmp_path_factory.mktemp("managed"), tls_certs, tls_users, *renames) as server:
        yield server


@pytest.fixture(scope="module")
def managed_worker(
    managed: TlsRedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    log = tmp_path_factory.mktemp("managed-worker") / "worker.log"
    # (the stats count from here: the worker's start and every path of the module)
    managed.client().config_resetstat()
    with worker(managed, log, 0):
        yield log


def envelope(call_id: str, tool: str, arguments: dict[str, Any]) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name=tool, arguments=arguments
    )


def test_ready_error_and_a_duplicate(managed: TlsRedisServer, managed_worker: Path) -> None:
    boundary = caller(managed, 0)
    ready = boundary.invoke(envelope("m1", "lookup", {"query": "managed"}), RUN, timeout=30)
    assert ready.status is InvocationStatus.READY, managed_worker.read_text()[-3000:]
    failed = boundary.invoke(envelope("m2", "boom", {}), RUN, timeout=30)
    assert failed.status is InvocationStatus.ERROR and failed.error_code is not None
    again = boundary.submit(envelope("m1", "lookup", {"query": "managed"}), RUN)
    assert again.outcome is not None
    assert again.outcome.error_code is ErrorCode.DUPLICATE_TOOL_CALL


def test_a_turn_sync_and_async(managed: TlsRedisServer, managed_worker: Path) -> None:
    boundary = caller(managed, 0)
    turn = [envelope(f"t{n}", "lookup", {"query": str(n)}) for n in range(4)]
    outcomes = boundary.invoke_many(turn[:2], RUN, timeout=30)
    assert [o.status for o in outcomes] == [InvocationStatus.READY] * 2, outcomes

    async def rest() -> list[Any]:
        try:
            return await boundary.ainvoke_many(turn[2:], RUN, timeout=30)
        finally:
            await boundary.aclose()

    outcomes = asyncio.run(rest())
    assert [o.status for o in outcomes] == [InvocationStatus.READY] * 2, outcomes


def test_a_long_tool_reports_progress_and_stops_at_the_operators_cancel(
    managed: TlsRedisServer, managed_worker: Path, tmp_path: Path
) -> None:
    boundary = caller(managed, 0)
    arguments = {"steps": 10_000, "step_s": 0.05, "dir": str(tmp_path)}
    assert boundary.submit(envelope("long-1", "beating", arguments), RUN).accepted
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="long-1")
    store = RedisCanonicalStore.from_url(managed.url_for("caller", 0), ttl_s=600)

    def progressed() -> bool:
        record = store.get(key)
        return record is not None and record.progress is not None

    wait_until(progressed, "the tool's progress")
    operator = ToolBoundary(
        store=RedisCanonicalStore.from_url(managed.url_for("operator", 0), ttl_s=600),
        registry=registry,
        dispatcher=CeleryDispatcher(
            create_app(role_settings(managed, "operator", 0), name="tls_operator")
        ),
    )
    assert operator.cancel(RUN.run_id, "long-1").error_code is ErrorCode.CANCELLED
    wait_until((tmp_path / "long-1-1-exit").exists, "the tool to stop")
    assert (tmp_path / "long-1-1-exit").read_text() == "cancelled"


class LostDispatcher:
    """Accepts a call and never sends it: its message is lost."""

    def dispatch(self, key: CanonicalKey) -> None:
        return None

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


def test_the_reaper_retries_a_lost_call(managed: TlsRedisServer, managed_worker: Path) -> None:
    store = RedisCanonicalStore.from_url(managed.url_for("caller", 0), ttl_s=600)
    lost = ToolBoundary(
        store=store,
        registry=registry,
        dispatcher=LostDispatcher(),
        max_pending_s=1,
        reap_grace_s=1,
    )
    run = RUN
    assert lost.submit(envelope("lost-1", "lookup", {"query": "lost"}), run).accepted
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id="lost-1")
    # When beat (here: the reaper's user) sends the reaper's pass, past the deadline and grace
    app = create_app(role_settings(managed, "reaper", 0), name="tls_reaper")

    def ended() -> tuple[CanonicalRecord | None] | None:
        record = store.get(key)
        if record is None or record.status is not InvocationStatus.PROJECTING:
            return (record,)
        app.send_task("tool_boundary.reap")
        return None

    (record,) = wait_until(
        ended, f"the reaper to retry the call (log: {managed_worker})", 60, every=1
    )
    # Then the worker's reaper sent it again (lookup's policy retries a lost call) and it ran
    assert record is not None and record.status is InvocationStatus.READY, record
    assert "'retried': 1" in managed_worker.read_text()


def test_no_product_path_sent_a_command_managed_services_refuse(
    managed: TlsRedisServer, managed_worker: Path
) -> None:
    stats = managed.client().info("commandstats")
    # (the admin's own RESETSTAT, once, before the worker started)
    assert stats.pop("cmdstat_config|resetstat")["calls"] == 1
    sent = {name.removeprefix("cmdstat_") for name in stats}
    assert sent, stats
    assert not {name.partition("|")[0] for name in sent} & {"config", "keys", "monitor", "debug"}
    assert not sent & set(NEVER_SENT), sorted(sent)
    # And no role was refused anything on the way (Redis's ACL log)
    log = managed.client().acl_log(200)
    refused = [e for e in log if str(e.get("username", "")).startswith("tb-")]
    assert refused == [], refused
    print("commands sent:", ", ".join(sorted(sent)))


def test_a_caller_without_the_seal_channels_still_gets_its_outcomes(
    managed: TlsRedisServer, managed_worker: Path
) -> None:
    # Given the caller's rules without channel patterns (a new Redis 7 user's default)
    rules = [rule for rule in role_rules("caller") if not rule.startswith("&")]
    add_user(managed, "tb-caller-nochannel", "nochannel-Pw-9d", rules)
    url = managed.url_as("tb-caller-nochannel", "nochannel-Pw-9d", 0)
    settings = celery_test_settings(redis_url=url, broker_url=url, result_backend=url)
    boundary = ToolBoundary(
        store=RedisCanonicalStore.from_url(url, ttl_s=600),
        registry=registry,
        dispatcher=CeleryDispatcher(create_app(settings, name="tls_nochannel")),
    )
    # When it invokes a call: its seal subscription is refused by Redis
    outcome = boundary.invoke(envelope("nc-1", "lookup", {"query": "nc"}), RUN, timeout=30)
    # Then the outcome still comes (read from the record), not a wait to the timeout
    assert outcome.status is InvocationStatus.READY, outcome
    refused = [e for e in managed.client().acl_log(200) if e["username"] == "tb-caller-nochannel"]
    assert {e["reason"] for e in refused} == {"channel"}, refused
    managed.client().acl_log_reset()
