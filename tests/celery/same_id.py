"""A process that makes one call, for the races between processes
(``test_replay_across_processes.py``).

``python -m tests.celery.same_id RUN_ID CALL_ID ARGS_JSON READY_PATH GO_PATH REPLAY``: builds
the boundary from its ``TOOL_BOUNDARY_*`` environment, creates READY_PATH once connected,
waits for GO_PATH to exist, invokes the ``counted`` tool and prints the outcome as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time

from boundary import RunContext, ToolCallEnvelope
from tasks import CeleryDispatcher, app
from tasks.runtime import get_runtime


def main() -> None:
    run_id, call_id, arguments, ready, go, replay = sys.argv[1:7]
    boundary = get_runtime().boundary(CeleryDispatcher(app))
    boundary.store.ping()
    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=3)
    run = RunContext(run_id=run_id, authorized_tools=frozenset({"counted"}))
    call = ToolCallEnvelope(
        run_id=run_id, tool_call_id=call_id, tool_name="counted", arguments=json.loads(arguments)
    )
    open(ready, "w").close()
    # Not wait_until: the racing processes' start barrier, as tight as can be (the test bounds it)
    while not os.path.exists(go):
        time.sleep(0.001)
    outcome = boundary.invoke(call, run, timeout=30, replay=replay == "1")
    print(json.dumps({"outcome": outcome.model_dump(mode="json")}), flush=True)


if __name__ == "__main__":
    main()
