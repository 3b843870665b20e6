"""How long a caller's and a tool's store calls take while Redis answers nothing (SIGSTOP).

    python -m bench.studies.chaos.paused [--pause-s 20] [--ports 22200-22299]

Against redis-servers of its own: the store, broker and result backend on one (as the
defaults have it), and a broker of its own for the cases that pause only one of them. Each
case pauses a server, waits a little over a second (so the store's ``INFO memory`` reading is
due again, as it is for most submits), times one call, and resumes the server. A call that
waited for Redis to come back would take the whole pause. Prints (JSON) each case's seconds
and what it answered; the bounds are in ``docs/explanation/waits.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.rig.servers import PortRange, RedisServer, named
from bench.studies.chaos.broker_kill import parse_ports
from bench.studies.chaos.tools import SLEEP, registry
from boundary import (
    CanonicalKey,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.call_context import CallScope
from tasks import CeleryDispatcher
from tasks.settings import Settings
from tasks.wiring.app import create_app

#: Seconds after the pause starts before the call is made: past the memory reading's interval.
SETTLE_S = 1.2


class PausedStore:
    """A boundary on its own servers, and one call left PROJECTING (no worker runs)."""

    def __init__(self, directory: Path, ports: PortRange) -> None:
        self.shared = named(ports, "shared", directory / "shared", appendonly=False)
        self.broker = named(ports, "broker", directory / "broker", appendonly=False)
        self.shared.start()
        self.broker.start()
        self.run = RunContext(run_id="paused", authorized_tools={SLEEP})
        self.pending = CanonicalKey(run_id="paused", tool_call_id="pending")
        self.boundary = self._boundary(self.shared.db_url(0))
        self.own_broker = self._boundary(self.broker.db_url(0))
        assert self.boundary.submit(self._call("pending"), self.run).accepted
        self._made = 0

    def _boundary(self, broker_url: str) -> ToolBoundary:
        settings = Settings(
            redis_url=self.shared.db_url(0),
            broker_url=broker_url,
            result_backend=self.shared.db_url(1),
        )
        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
        app = create_app(settings, name=f"paused-{broker_url.rsplit(':', 1)[-1]}")
        return ToolBoundary(store=store, registry=registry, dispatcher=CeleryDispatcher(app))

    def _call(self, tool_call_id: str) -> ToolCallEnvelope:
        return ToolCallEnvelope(
            run_id="paused", tool_call_id=tool_call_id, tool_name=SLEEP, arguments={"seconds": 0}
        )

    def next_call(self) -> ToolCallEnvelope:
        self._made += 1
        return self._call(f"c{self._made}")

    def close(self) -> None:
        self.shared.stop()
        self.broker.stop()


def timed(server: RedisServer, pause_s: float, call: Callable[[], Any]) -> dict[str, Any]:
    """Pauses ``server``, makes ``call`` once, resumes it; the call's seconds and answer."""
    server.pause()
    try:
        time.sleep(SETTLE_S)
        started = time.monotonic()
        answer = call()
        seconds = time.monotonic() - started
    finally:
        # Whatever happened, the server comes back at the end of the pause (not before: a
        # call still blocked in another thread must not be answered early).
        time.sleep(max(pause_s - SETTLE_S - (time.monotonic() - started), 0))
        server.resume()
    time.sleep(0.5)
    return {"seconds": round(seconds, 2), "answer": answer}


def _answer_of(outcome: Any) -> str:
    return str(outcome.error_code.value if outcome.error_code else outcome.status.value)


def measure(directory: Path, ports: PortRange, pause_s: float) -> dict[str, Any]:
    setup = PausedStore(directory, ports)
    b, run, pending = setup.boundary, setup.run, setup.pending
    try:

        def submit(boundary: ToolBoundary) -> Callable[[], str]:
            def made() -> str:
                submission = boundary.submit(setup.next_call(), run)
                return "accepted" if submission.accepted else _answer_of(submission.outcome)

            return made

        def heartbeat() -> str:
            scope = CallScope(b.store, pending, tool_name=SLEEP, attempt=1, time_limit_s=60)
            scope.beat(progress=0.5, message="working")
            return f"returned, {scope.writes} write(s) stored"

        async def asubmit() -> str:
            submission = await b.asubmit(setup.next_call(), run)
            return "accepted" if submission.accepted else _answer_of(submission.outcome)

        async def aoutcome() -> str:
            return _answer_of(await b.aoutcome(run.run_id, pending.tool_call_id, timeout=0.5))

        return {
            "pause_s": pause_s,
            "submit, one Redis paused": timed(setup.shared, pause_s, submit(b)),
            "asubmit, one Redis paused": timed(
                setup.shared, pause_s, lambda: asyncio.run(asubmit())
            ),
            "submit, store paused (own broker)": timed(
                setup.shared, pause_s, submit(setup.own_broker)
            ),
            "submit, broker paused (store answers)": timed(
                setup.broker, pause_s, submit(setup.own_broker)
            ),
            "outcome(timeout=0.5), store paused": timed(
                setup.shared,
                pause_s,
                lambda: _answer_of(b.outcome(run.run_id, pending.tool_call_id, timeout=0.5)),
            ),
            "outcome(timeout=3), store paused": timed(
                setup.shared,
                pause_s,
                lambda: _answer_of(b.outcome(run.run_id, pending.tool_call_id, timeout=3)),
            ),
            "aoutcome(timeout=0.5), store paused": timed(
                setup.shared, pause_s, lambda: asyncio.run(aoutcome())
            ),
            "heartbeat, store paused": timed(setup.shared, pause_s, heartbeat),
        }
    finally:
        setup.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause-s", type=float, default=20.0, help="seconds each pause lasts")
    parser.add_argument("--ports", default="22200-22299", help="FIRST-LAST for the redis-servers")
    parser.add_argument("--dir", default=None, help="where the servers' data goes")
    args = parser.parse_args(argv)
    directory = Path(args.dir or tempfile.mkdtemp(prefix="chaos-paused-"))
    json.dump(measure(directory, parse_ports(args.ports), args.pause_s), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
