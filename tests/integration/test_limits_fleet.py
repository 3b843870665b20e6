"""``tool-boundary limits`` and the web view's limits page against real Redis: every limited
tool the fleet uses is listed, whatever the reader's own registry (the store's index of
limited tools, no scan); counts past their bound are refused (exit 2); ``reset`` of an
unknown tool is refused like ``set``; an unreachable store exits 3 (a 503 page)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from boundary import (
    CanonicalKey,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
    ToolSpec,
)
from boundary.flow import Flow
from boundary.store import keys
from tasks.cli.main import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE, cli
from tasks.web.app import create_app
from tests.conftest import STORE_DB, redis_url
from tests.support.celery_tools import HitsProjector, lookup
from tests.support.servers import redis_server
from tests.web.server import fetch, serving

#: A limited tool of another registry than the reader's (``tests.support.celery_tools:registry``).
OTHER = "fleet_only_tool"
RUN = RunContext(run_id="limits-run", authorized_tools=frozenset({OTHER}))


class HeldDispatcher:
    """Records calls and never runs them: they stay PROJECTING for the test."""

    def dispatch(self, key: CanonicalKey) -> None:
        return None

    def wait(self, key: CanonicalKey, timeout: float | None) -> dict[str, Any] | None:
        return None


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", redis_url(STORE_DB))
    monkeypatch.setenv("TOOL_BOUNDARY_TOOLS", "tests.support.celery_tools:registry")


def other_registry() -> ToolRegistry:
    spec = ToolSpec(
        name=OTHER,
        executor=lookup,
        projector=HitsProjector(),
        read_only=True,
        timeout_s=5.0,
        concurrency=1,
    )
    return ToolRegistry([spec])


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def other_calls(store: RedisCanonicalStore) -> None:
    """Three calls of ``OTHER`` made by a process with its own registry: one runs, two wait."""
    boundary = ToolBoundary(store=store, registry=other_registry(), dispatcher=HeldDispatcher())
    for n in (1, 2, 3):
        envelope = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id=f"o{n}", tool_name=OTHER, arguments={"query": "q"}
        )
        assert boundary.submit(envelope, RUN).accepted


def test_limits_lists_a_limited_tool_of_another_registry(
    env: None, other_calls: None, store: RedisCanonicalStore
) -> None:
    # When limits is asked by a process whose registry does not have the tool
    result = run_cli("limits", "--json")
    # Then it lists it with its declared limit, its running and its waiting calls
    assert result.exit_code == 0, result.output
    views = {view["tool"]: view for view in json.loads(result.output)}
    assert OTHER in views, sorted(views)
    assert (views[OTHER]["concurrency"], views[OTHER]["running"], views[OTHER]["waiting"]) == (
        1,
        1,
        2,
    )
    # And so does the web view's limits page (its own registry is empty)
    flow = Flow(RedisCanonicalStore.from_url(redis_url(STORE_DB)), ToolRegistry(), None)
    with serving(create_app(store, flow=flow)) as served:
        page = fetch(f"{served.base}/limits")
    assert page.status == 200
    row = page.body[page.body.index(OTHER) :]
    assert 'data-label="running">1<' in row and 'data-label="waiting">2<' in row
    # And its reset is accepted (the store knows it), not refused as an unknown tool
    reset = run_cli("limits", "reset", OTHER)
    assert reset.exit_code == 0, reset.output


@pytest.mark.parametrize(
    "option",
    [
        ["--concurrency", "99999999999999999999999"],
        ["--tenant-concurrency", "1000001"],
        ["--max-waiting", "99999999999999999999999"],
        ["--rate", "99999999999999999999999/60"],
        ["--concurrency", "0"],
    ],
)
def test_a_count_past_its_bound_is_refused_with_exit_2(
    env: None, redis_client: redis.Redis, option: list[str]
) -> None:
    result = run_cli("limits", "set", "lookup", *option)
    assert result.exit_code == EXIT_USAGE, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith(f"error: {option[0]} ")
    assert redis_client.hgetall(keys.FLOW_OVERRIDES) == {}


def test_an_override_row_ends_without_a_stray_semicolon(
    env: None, redis_client: redis.Redis
) -> None:
    result = run_cli("limits", "set", "lookup", "--concurrency", "2")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "concurrency 2 (override)" in flat, result.output
    assert "; (override)" not in flat and not flat.rstrip("│ ").endswith(";")
    assert run_cli("limits", "reset", "lookup").exit_code == 0


def test_reset_of_an_unknown_tool_is_refused_like_set(env: None, redis_client: redis.Redis) -> None:
    refused = run_cli("limits", "set", "no_such_tool", "--concurrency", "2")
    reset = run_cli("limits", "reset", "no_such_tool")
    assert (refused.exit_code, reset.exit_code) == (EXIT_NOT_FOUND, EXIT_NOT_FOUND)
    assert reset.output == refused.output
    assert redis_client.hgetall(keys.FLOW_OVERRIDES) == {}


@pytest.fixture
def stopped_redis(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path / "redis") as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        server.stop()
        yield url


def test_an_unreachable_store_exits_3_whatever_the_registry(
    stopped_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", stopped_redis)
    for tools in ("", "tests.support.celery_tools:registry"):
        monkeypatch.setenv("TOOL_BOUNDARY_TOOLS", tools)
        result = run_cli("limits")
        assert result.exit_code == EXIT_UNAVAILABLE, (tools, result.output)
        assert "unreachable" in result.output


def test_the_limits_page_of_an_unreachable_store_is_a_503(stopped_redis: str) -> None:
    store = RedisCanonicalStore.from_url(stopped_redis)
    flow = Flow(store, ToolRegistry(), None)
    with serving(create_app(store, flow=flow)) as served:
        page = fetch(f"{served.base}/limits")
    assert page.status == 503
    assert "STORE_UNAVAILABLE" in page.body
