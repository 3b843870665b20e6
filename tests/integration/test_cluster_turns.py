"""A model turn on a Redis Cluster: each run's turn is one ``create_many.lua`` on the node of
its ``{run_id}`` hash slot (every key of the script shares it), on every node, and the runs
are indexed and pending as one by one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from boundary import (
    InProcessDispatcher,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from tests.support.celery_tools import registry
from tests.support.servers import RedisServer, redis_cluster

RUNS = 6
CALLS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    with redis_cluster(tmp_path_factory.mktemp("cluster-turns")) as servers:
        yield servers


def test_turns_of_runs_on_every_node_are_created_in_one_script_and_end_ready(
    cluster: list[RedisServer],
) -> None:
    store = RedisCanonicalStore.from_url(cluster[0].url, ttl_s=600, cluster=True)
    boundary = ToolBoundary(
        store=store, registry=registry, dispatcher=InProcessDispatcher(store, registry)
    )
    runs = [
        RunContext(
            run_id=f"cl-turn-{n}",
            authorized_tools=frozenset({"lookup"}),
            max_calls_per_tool={"lookup": CALLS - 1},
        )
        for n in range(RUNS)
    ]
    owners = {store.client.get_node_from_key(f"{{{run.run_id}}}").port for run in runs}
    assert len(owners) == len(cluster), "the runs' slots should cover every node"
    # When each run's turn of calls (one over the tool's budget) is invoked at once
    outcomes = [
        boundary.invoke_many(
            [
                ToolCallEnvelope(
                    run_id=run.run_id,
                    tool_call_id=f"c{c}",
                    tool_name="lookup",
                    arguments={"query": str(c)},
                )
                for c in range(CALLS)
            ],
            run,
            timeout=30,
        )
        for run in runs
    ]
    # Then in every run the calls within the budget end READY and the last is refused
    for turn in outcomes:
        assert [o.status for o in turn[:-1]] == [InvocationStatus.READY] * (CALLS - 1), turn
        assert turn[-1].error_code is not None
        assert turn[-1].error_code.value == "TOOL_BUDGET_EXHAUSTED"
    # And every run is indexed (the runs index, on its own slot) and has nothing pending
    assert sorted(store.run_ids()) == sorted(run.run_id for run in runs)
    assert store.due_pending() == []
    for run in runs:
        assert len(boundary.observe(run).facts) == CALLS - 1
