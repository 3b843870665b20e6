"""The MCP door over TLS: ``tool-boundary mcp`` (stdio) as the MCP server's ACL user, a threads
worker as the worker's, a call READY with its bounded result; Redis refused the MCP user
nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from boundary import RedisCanonicalStore, RunContext
from tasks.mcp_server.results import RUN_ID_META, TOOL_CALL_ID_META
from tests.mcp.servers import stdio_client
from tests.tls.servers import TlsRedisServer
from tests.tls.stack import worker

RUN = RunContext(run_id="run-mcp-tls", authorized_tools=frozenset({"lookup"}))


def test_a_call_through_the_mcp_door_over_tls(tls_redis: TlsRedisServer, tmp_path: Path) -> None:
    store = RedisCanonicalStore.from_url(tls_redis.url_for("caller", 0), ttl_s=600)
    assert store.open_run(RUN).is_open
    url = tls_redis.url_for("mcp", 0)

    async def scenario() -> dict[str, object]:
        async with stdio_client(
            "--run",
            RUN.run_id,
            TOOL_BOUNDARY_REDIS_URL=url,
            TOOL_BOUNDARY_BROKER_URL=url,
            TOOL_BOUNDARY_RESULT_BACKEND=url,
        ) as client:
            meta: dict[str, Any] = {RUN_ID_META: RUN.run_id, TOOL_CALL_ID_META: "mcp-1"}
            result = await client.call_tool("lookup", {"query": "tls"}, meta=meta)
            assert result.is_error is False, result
            return dict(result.structured_content or {})

    with worker(tls_redis, tmp_path / "worker.log", 0):
        content = anyio.run(scenario)
    assert content.get("status") == "READY", content
    refused = [e for e in tls_redis.client().acl_log(200) if e.get("username") == "tb-mcp"]
    assert refused == [], refused
