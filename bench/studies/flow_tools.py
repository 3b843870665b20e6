"""The tools of the flow-control benchmark (``bench/studies/flow.py``): the no-op tool with limits
of each kind. Workers load them with ``TOOL_BOUNDARY_TOOLS=bench.studies.flow_tools:registry``."""

from __future__ import annotations

from functools import cache
from typing import Any

import redis

from bench.peers.tools import NOOP, NoopProjector, noop
from boundary import RateLimit, ToolRegistry, ToolSpec, current_call

#: Where ``rated`` calls leave their start time (ms, the store's clock), in the store's DB.
STARTS_KEY = "tb:bench-flow:starts"


@cache
def _client() -> redis.Redis:
    from tasks.runtime import get_settings

    return redis.Redis.from_url(get_settings().store_url, decode_responses=True)


def noted(arguments: dict[str, Any]) -> dict[str, Any]:
    """The no-op tool that also notes when it started, as its rate window counted it."""
    call = current_call()
    if call is not None and call.started_at is not None:
        _client().rpush(STARTS_KEY, int(call.started_at.timestamp() * 1000))
    return noop(arguments)


def _spec(name: str, executor: Any = noop, **limits: Any) -> ToolSpec:
    return ToolSpec(
        name=name,
        executor=executor,
        projector=NoopProjector(),
        read_only=True,
        timeout_s=30,
        **limits,
    )


registry = ToolRegistry(
    [
        _spec(NOOP),
        # Limited, with a slot always free for a sequential caller.
        _spec("limited", concurrency=64),
        # One at a time: every call but the first waits in line.
        _spec("one_at_a_time", concurrency=1),
        # Twenty starts a second, fleet-wide.
        _spec("rated", noted, rate_limit=RateLimit(limit=20, period_s=1.0)),
    ]
)
