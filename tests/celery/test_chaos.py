"""A short chaos run (``bench.studies.chaos``, fixed seed): its own redis-servers, a threads and a
prefork worker, beat, sync and async callers, and every kind of fault once (servers killed
with and without AOF, paused, full; workers and a prefork child killed). Once the system has
settled, nothing accepted is lost or stuck, no worker exited unplanned and no slot is held.
The figures of longer runs are in ``bench/README.md``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.rig.servers import PortRange
from bench.studies.chaos.report import summary
from bench.studies.chaos.run import chaos
from tests.support.servers import free_port, redis_server_binary, release_port

#: Rounds of faults: each of the ten fault kinds once. The load and the faults stop once the
#: round is injected (not after a fixed time), at the latest after MINUTES.
ROUNDS = 1
MINUTES = 1.5
SEED = 32


def handed_out(taken: list[int]) -> Iterator[int]:
    while True:
        port = free_port()
        taken.append(port)
        yield port


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.xdist_group("chaos")
def test_a_short_chaos_run_loses_nothing_and_no_worker_exits(tmp_path: Path) -> None:
    redis_server_binary()  # skips locally, fails under CI, without redis-server
    taken: list[int] = []
    try:
        report = chaos(
            MINUTES, SEED, tmp_path / "chaos", PortRange.of(handed_out(taken)), rounds=ROUNDS
        )
    finally:
        for port in taken:
            release_port(port)
    print(summary(report, SEED, MINUTES))
    shown = json.dumps(report, indent=2)
    # The run did what it says: calls were accepted and every kind of fault was injected
    assert report["accepted"] > 0, shown
    assert len(report["faults"]) == 10, shown
    assert not report["details"]["fault_failures"], shown
    assert report["details"]["fleet_whole_at_end"], shown
    # And after settling nothing is lost or stuck, no worker exited, no slot is held
    assert report["lost"] == 0, shown
    assert report["stuck"] == 0, shown
    assert report["unplanned_worker_exits"] == 0, shown
    assert report["slots_left_held"] == 0, shown
