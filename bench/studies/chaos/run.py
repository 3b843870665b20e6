"""One chaos run: the fleet up, the load and the faults for ``minutes``, then the system left
alone to settle, then the report."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.rig.servers import PortRange
from bench.studies.chaos import report
from bench.studies.chaos.faults import Injector
from bench.studies.chaos.fleet import Fleet
from bench.studies.chaos.load import Load
from bench.studies.chaos.tools import registry
from boundary import ToolBoundary
from tasks import CeleryDispatcher
from tasks.runtime import store_from_settings
from tasks.wiring.app import create_app

#: Seconds the system gets to settle after the last fault: above the reaper's reach
#: (``MAX_PENDING_S`` 20 s, the longest tool's limit) and the visibility timeout (60 s).
SETTLE_S = 150.0
#: Seconds the fleet gets to be whole again after the last fault (a Sentinel resync).
WHOLE_S = 60.0


def chaos(
    minutes: float,
    seed: int,
    directory: Path,
    ports: PortRange,
    *,
    sentinel: bool = False,
    min_replicas: int = 0,
    settle_s: float = SETTLE_S,
    rounds: int | None = None,
) -> dict[str, Any]:
    """Runs the chaos run; returns its report (``bench.studies.chaos.report``). With
    ``rounds``, the load and the faults stop once that many rounds of faults were injected
    (at the latest after ``minutes``)."""
    directory.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=directory / "callers.log",
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        force=True,
    )
    fleet = Fleet(directory, ports, sentinel=sentinel, min_replicas=min_replicas)
    load: Load | None = None
    injector: Injector | None = None
    try:
        fleet.start()
        settings = fleet.settings
        store = store_from_settings(settings)
        boundary = ToolBoundary(
            store=store,
            registry=registry,
            dispatcher=CeleryDispatcher(create_app(settings, name="chaos-callers")),
            max_pending_s=settings.max_pending_s,
            reap_grace_s=settings.reap_grace_s,
        )
        load = Load(boundary, seed)
        injector = Injector(fleet, seed, sentinel=sentinel, rounds=rounds)
        started = time.monotonic()
        load.start()
        injector.start()
        injector.done.wait(minutes * 60)
        injector.stop()
        load.stop()
        loaded_s = time.monotonic() - started
        give_up = time.monotonic() + WHOLE_S
        while not fleet.whole() and time.monotonic() < give_up:
            time.sleep(0.5)
        records, settled_s = report.settle(store, load.seen, settle_s)
        details = {
            "seed": seed,
            "minutes": minutes,
            "rounds": rounds,
            "sentinel": sentinel,
            "min_replicas": min_replicas,
            "load_s": round(loaded_s, 1),
            "settle_s": round(settled_s, 1),
            "fleet_whole_at_end": fleet.whole(),
            "faults_in_order": [f"{i.at_s}s {i.fault} ({i.seconds}s)" for i in injector.injected],
            "fault_failures": injector.failed,
        }
        faults = Counter(i.fault for i in injector.injected)
        found = report.build(fleet, store, load.seen, records, faults=faults, details=details)
        (directory / "report.json").write_text(json.dumps(found, indent=2) + "\n")
        return found
    finally:
        # Also on an interrupt: no fault or caller may outlive the fleet.
        if injector is not None:
            injector.stop()
        if load is not None:
            load.stop()
        fleet.stop()
