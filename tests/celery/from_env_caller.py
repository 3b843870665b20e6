"""A caller process built only from its ``TOOL_BOUNDARY_*`` environment, as a user's would be
(``test_boundary_from_env.py``).

``python -m tests.celery.from_env_caller RUN_ID [TOOL ARGS_JSON]...``: builds
``tasks.boundary_from_env`` with the test tools, invokes each ``TOOL ARGS_JSON`` pair as a
call of RUN_ID (``c1``, ``c2``...) and prints one JSON line: what the boundary was built
with (TTL, limits, Cluster mode, pending and reap times) and the outcomes, in order.
"""

from __future__ import annotations

import json
import sys

import redis.cluster

from boundary import RunContext, ToolCallEnvelope
from tasks import boundary_from_env
from tests.support.celery_tools import registry


def main() -> None:
    run_id, pairs = sys.argv[1], sys.argv[2:]
    boundary = boundary_from_env(registry)
    store = boundary.store
    tools = pairs[0::2]
    run = RunContext(run_id=run_id, authorized_tools=frozenset(tools))
    outcomes = []
    for n, (tool, arguments) in enumerate(zip(tools, pairs[1::2], strict=True), start=1):
        call = ToolCallEnvelope(
            run_id=run_id, tool_call_id=f"c{n}", tool_name=tool, arguments=json.loads(arguments)
        )
        outcomes.append(boundary.invoke(call, run, timeout=60).model_dump(mode="json"))
    built = {
        "ttl_s": store.ttl_s,  # type: ignore[attr-defined]
        "limits": store.limits.model_dump(mode="json"),
        "cluster": isinstance(store.client, redis.cluster.RedisCluster),  # type: ignore[attr-defined]
        "max_pending_s": boundary.max_pending_s,
        "reap_grace_s": boundary.reap_grace_s,
    }
    print(json.dumps({"built": built, "outcomes": outcomes}), flush=True)


if __name__ == "__main__":
    main()
