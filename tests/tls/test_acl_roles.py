"""The shipped ACL file's users (``docs/how-to/production-redis.acl``) over TLS: the operator's
read-only user reads everything the CLI and the web view show and is refused every write by
Redis itself (a cancel, which is a seal; DEL; FLUSHDB), no role may run the commands managed
services refuse, and the operator's user cancels."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from boundary import (
    CanonicalKey,
    ErrorCode,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.store import keys
from tasks.cli.main import cli
from tasks.settings import Settings
from tasks.web.server import build_app
from tests.support.celery_tools import registry
from tests.tls.servers import ROLES, TlsRedisServer, add_user, role_rules
from tests.web.server import fetch, serving

#: What managed services refuse or rename, and no role of ours needs.
MANAGED_REFUSED = (
    ("FLUSHDB",),
    ("FLUSHALL",),
    ("KEYS", "*"),
    ("CONFIG", "SET", "maxmemory", "1"),
    ("DEBUG", "SLEEP", "0"),
    ("SCRIPT", "FLUSH"),
    ("CLIENT", "KILL", "TYPE", "normal"),
    ("MONITOR",),
)
RUN = RunContext(run_id="run-acl", authorized_tools=frozenset({"lookup"}))
#: The categories the file granted before each role got its explicit command list.
CATEGORY_GRANTS = {
    "write": "-@all +@read +@write +@keyspace +@list +@hash +@set +@sortedset +@string "
    "+@scripting +@transaction +@pubsub +@connection -@dangerous -@admin",
    "read": "-@all +@read +@connection +@scripting -@dangerous -@admin",
}
#: Commands no path of ours sends that those categories allowed (and the lists refuse), on a
#: key each role may reach.
NOT_NEEDED = {
    "write": (
        ("RENAME", "tb:a", "tb:b"),
        ("COPY", "tb:a", "tb:b"),
        ("SINTERSTORE", "tb:a", "tb:b"),
        ("EVAL", "return 1", "0"),
        ("APPEND", "tb:a", "x"),
        ("UNLINK", "tb:a"),
        ("LMOVE", "tb:a", "tb:b", "LEFT", "LEFT"),
        ("ZUNIONSTORE", "tb:a", "1", "tb:b"),
        ("HSETNX", "tb:a", "f", "v"),
        ("RANDOMKEY",),
        ("TYPE", "tb:a"),
        ("OBJECT", "ENCODING", "tb:a"),
    ),
    "read": (
        ("RANDOMKEY",),
        ("TYPE", "tb:a"),
        ("OBJECT", "ENCODING", "tb:a"),
        ("EVAL_RO", "return 1", "0"),
        ("SRANDMEMBER", "tb:a"),
        ("HSCAN", "tb:a", "0"),
        ("DUMP", "tb:a"),
    ),
}


class HeldDispatcher:
    """Never runs a call: it stays PROJECTING for the test."""

    def dispatch(self, key: CanonicalKey) -> None:
        return None

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


def store_as(server: TlsRedisServer, role: str) -> RedisCanonicalStore:
    return RedisCanonicalStore.from_url(server.url_for(role, 0), ttl_s=600)


def held_call(server: TlsRedisServer, call_id: str) -> CanonicalKey:
    """A PROJECTING call the caller's user created."""
    boundary = ToolBoundary(
        store=store_as(server, "caller"), registry=registry, dispatcher=HeldDispatcher()
    )
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name="lookup", arguments={"query": "q"}
    )
    assert boundary.submit(envelope, RUN).accepted
    return CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)


def refusals(server: TlsRedisServer, user: str) -> list[dict[str, Any]]:
    """Redis's own log of what it refused ``user`` (ACL LOG)."""
    return [e for e in server.client().acl_log(200) if e.get("username") == user]


def web_settings(server: TlsRedisServer, role: str) -> Settings:
    url = server.url_for(role, 0)
    return Settings(redis_url=url, broker_url=url, tools="tests.support.celery_tools:registry")


@pytest.mark.parametrize("role", ROLES)
def test_no_role_may_flush_list_keys_configure_or_debug(
    tls_redis: TlsRedisServer, role: str
) -> None:
    client = tls_redis.role_client(role)
    admin = tls_redis.client()
    for command in MANAGED_REFUSED:
        # Redis's own verdict for the user (ACL DRYRUN runs nothing)...
        verdict = admin.execute_command("ACL", "DRYRUN", f"tb-{role}", *command)  # type: ignore[no-untyped-call]
        assert verdict != "OK" and "no permissions" in str(verdict), (command, verdict)
        if command[0] in ("DEBUG", "MONITOR"):
            continue  # (DEBUG is off on any connection; MONITOR, if let through, would hang)
        # ... and what the user's own connection gets
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("role", ROLES)
def test_each_role_is_refused_commands_its_categories_allowed_and_it_does_not_need(
    tls_redis: TlsRedisServer, role: str
) -> None:
    kind = "read" if role == "operator-read" else "write"
    admin = tls_redis.client()
    # (a user with the role's former category grant, on the same keys and channels)
    patterns = [rule for rule in role_rules(role) if rule.startswith(("~", "%", "&", "reset"))]
    wide = f"tb-wide-{role}"
    add_user(tls_redis, wide, "wide-Pw-3f", [*patterns, *CATEGORY_GRANTS[kind].split()])
    client = tls_redis.role_client(role)
    try:
        for command in NOT_NEEDED[kind]:
            allowed = admin.execute_command("ACL", "DRYRUN", wide, *command)  # type: ignore[no-untyped-call]
            assert allowed == "OK", (command, allowed)
            verdict = admin.execute_command("ACL", "DRYRUN", f"tb-{role}", *command)  # type: ignore[no-untyped-call]
            assert "no permissions" in str(verdict), (command, verdict)
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)  # type: ignore[no-untyped-call]
    finally:
        admin.acl_deluser(wide)
        admin.acl_log_reset()


def test_the_read_only_operator_is_refused_writes_by_redis(tls_redis: TlsRedisServer) -> None:
    key = held_call(tls_redis, "ro-1")
    record_key = keys.record_key(key)
    reader = tls_redis.role_client("operator-read")
    assert reader.exists(record_key) == 1
    tls_redis.client().acl_log_reset()
    # When the read-only user deletes a record, or writes a key of the store
    for write in (("DEL", record_key), ("SET", "tb:forged", "x"), ("FLUSHDB",)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            reader.execute_command(*write)  # type: ignore[no-untyped-call]
    # (and a publish on a run's seal channel, which would wake its waiters)
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.publish(keys.sealed_channel(key.run_id), "forged")
    # When it cancels the call through the boundary: the cancel's seal script is refused
    boundary = ToolBoundary(
        store=store_as(tls_redis, "operator-read"), registry=registry, dispatcher=HeldDispatcher()
    )
    outcome = boundary.cancel(key.run_id, key.tool_call_id)
    assert outcome.error_code is not ErrorCode.CANCELLED, outcome
    # Then the record is as it was, and Redis logged each refusal for that user
    record = store_as(tls_redis, "caller").get(key)
    assert record is not None and record.status is InvocationStatus.PROJECTING
    refused = refusals(tls_redis, "tb-operator-read")
    objects = {(entry["reason"], entry["object"]) for entry in refused}
    # (the seal script's first write, inside the script, is refused: nothing was written)
    assert ("command", "lua") in {(e["reason"], e["context"]) for e in refused}, refused
    assert {("command", "del"), ("command", "set"), ("command", "flushdb")} <= objects, refused
    assert outcome.error_code is ErrorCode.STORE_UNAVAILABLE, outcome


def test_the_read_only_operator_shows_runs_and_observes(
    tls_redis: TlsRedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    held_call(tls_redis, "show-1")
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", tls_redis.url_for("operator-read", 0))
    shown = CliRunner().invoke(cli, ["show", RUN.run_id, "show-1", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["status"] == "PROJECTING"
    listed = CliRunner().invoke(cli, ["runs", "--json"])
    assert listed.exit_code == 0, listed.output
    assert RUN.run_id in listed.stdout
    observed = CliRunner().invoke(cli, ["observe", RUN.run_id, "--json"])
    assert observed.exit_code == 0, observed.output
    for text in (shown.output, listed.output, observed.output):
        assert all(p not in text for p in tls_redis.users.passwords.values())
        assert "rediss://" not in text


def test_the_web_view_reads_as_the_read_only_user_and_cancels_as_the_operator(
    tls_redis: TlsRedisServer,
) -> None:
    key = held_call(tls_redis, "web-1")
    action = f"/runs/{RUN.run_id}/calls/web-1/cancel"
    for role in ("operator-read", "operator"):
        with serving(build_app(web_settings(tls_redis, role), show_raw=False, token=None)) as web:
            page = fetch(f"{web.base}/runs/{RUN.run_id}")
            assert page.status == 200 and "web-1" in page.body
            call_page = fetch(f"{web.base}/runs/{RUN.run_id}/calls/web-1")
            assert call_page.status == 200
            for answer in (page, call_page):
                assert all(p not in answer.body for p in tls_redis.users.passwords.values())
            form = page.body[page.body.index(f'action="{action}"') :]
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form)
            assert csrf is not None
            posted = fetch(web.base + action, data=f"csrf={csrf.group(1)}&back=run".encode())
            record = store_as(tls_redis, "caller").get(key)
            assert record is not None
            if role == "operator-read":
                # Redis refused the read-only user's cancel: the call runs on
                assert record.status is InvocationStatus.PROJECTING, posted
                assert "CANCELLED" not in posted.headers.get("location", "")
            else:
                assert record.error_code is ErrorCode.CANCELLED, posted
