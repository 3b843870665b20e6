"""A caller of the rolling-upgrade test (``test_rolling_upgrade.py``), run as a script by
either version: with ``PYTHONPATH`` at the previous release's tree it is an old caller. It
uses only API both versions have.

    python rolling_caller.py OUT RUN_ID COUNT SPREAD_S

Submits ``COUNT`` calls of run ``RUN_ID`` spread over ``SPREAD_S`` seconds (quick lookups,
long heartbeating calls, a limited tool's calls, turns of three), waits for every outcome and
writes them to ``OUT`` as JSON, by call id.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from boundary import RunContext, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime, get_settings
from tasks.wiring.app import create_app

TOOLS = frozenset({"lookup", "beating", "slot3"})


def call(run_id: str, i: int) -> tuple[str, dict[str, Any]]:
    """Call ``i``'s tool and arguments: one long call in 20, two of the limited tool, a turn
    of three (calls 3, 4, 5 of each 20), the rest quick."""
    kind = i % 20
    if kind == 0:
        return "beating", {"steps": 15, "step_s": 0.1}
    if kind in (1, 2):
        return "slot3", {"tag": run_id, "ms": 50}
    return "lookup", {"query": f"q{i}"}


def envelope(run_id: str, i: int) -> ToolCallEnvelope:
    tool, arguments = call(run_id, i)
    return ToolCallEnvelope(
        run_id=run_id, tool_call_id=f"c{i}", tool_name=tool, arguments=arguments
    )


def main() -> None:
    out, run_id, count, spread_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    app = create_app(get_settings(), name=f"rolling_caller_{run_id}")
    boundary = get_runtime().boundary(CeleryDispatcher(app))
    run = RunContext(run_id=run_id, authorized_tools=TOOLS)
    started = time.monotonic()
    i = 0
    while i < count:
        # Paced: call i goes at its share of the spread.
        ahead = started + spread_s * i / count - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        if i % 20 == 3 and i + 2 < count:
            turn = [envelope(run_id, j) for j in range(i, i + 3)]
            assert all(s.accepted for s in boundary.submit_many(turn, run)), i
            i += 3
            continue
        assert boundary.submit(envelope(run_id, i), run).accepted, i
        i += 1
    outcomes = {
        f"c{j}": boundary.outcome(run_id, f"c{j}", timeout=90).model_dump(mode="json")
        for j in range(count)
    }
    with open(out, "w") as file:
        json.dump(outcomes, file)


if __name__ == "__main__":
    main()
