"""The chaos run's mixed load: sync callers on threads and async callers on one event loop,
each making calls one after another (short tools, heartbeating long tools that retry, the
limited tool) and cancelling some long ones, until told to stop.

What each caller saw is kept in ``Seen``: the calls accepted (the report's population), the
codes of the ones refused at submit, and the last outcome each caller read.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.studies.chaos.tools import LIMITED, LONG, SHORT
from boundary import RunContext, ToolBoundary, ToolCallEnvelope, ToolOutcome

logger = logging.getLogger(__name__)

#: What a caller makes, by weight: a short call, a long one, a limited one, a long one that
#: it cancels.
KINDS = ("short", "long", "limited", "cancel")
WEIGHTS = (60, 15, 15, 10)
#: Calls per run before a caller opens another run.
CALLS_PER_RUN = 100
#: A caller waits at most this long per outcome read, and reads at most ``READS`` times.
WAIT_S = 5.0
READS = 4


@dataclass
class Seen:
    """What the callers saw (thread-safe)."""

    accepted: dict[tuple[str, str], str] = field(default_factory=dict)
    refused: Counter[str] = field(default_factory=Counter)
    #: The code each refused call got at submit.
    refused_calls: dict[tuple[str, str], str] = field(default_factory=dict)
    last_outcome: dict[tuple[str, str], str] = field(default_factory=dict)
    cancels: int = 0
    caller_errors: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def submitted(self, call: ToolCallEnvelope, accepted: bool, code: str | None) -> None:
        with self._lock:
            if accepted:
                assert call.run_id and call.tool_call_id and call.tool_name
                self.accepted[(call.run_id, call.tool_call_id)] = call.tool_name
            else:
                self.refused[code or "?"] += 1
                assert call.run_id and call.tool_call_id
                self.refused_calls[(call.run_id, call.tool_call_id)] = code or "?"

    def read(self, identity: tuple[str, str], outcome: ToolOutcome) -> None:
        with self._lock:
            self.last_outcome[identity] = _label(outcome)

    def cancelled(self, identity: tuple[str, str], outcome: ToolOutcome) -> None:
        with self._lock:
            self.cancels += 1
            self.last_outcome[identity] = _label(outcome)

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self.caller_errors[type(exc).__name__] += 1


def _label(outcome: ToolOutcome) -> str:
    return str(outcome.error_code.value if outcome.error_code else outcome.status.value)


@dataclass(frozen=True)
class Plan:
    call: ToolCallEnvelope
    run: RunContext
    cancel_after_s: float | None


class Caller:
    """Plans one caller's calls from its own seeded random source."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = random.Random(f"{seed}:{name}")
        self.made = 0

    def next_plan(self) -> Plan:
        kind = self.rng.choices(KINDS, WEIGHTS)[0]
        tool, seconds = {
            "short": (SHORT, self.rng.uniform(0.05, 0.2)),
            "long": (LONG, self.rng.uniform(2.0, 6.0)),
            "limited": (LIMITED, self.rng.uniform(0.3, 1.0)),
            "cancel": (LONG, self.rng.uniform(5.0, 8.0)),
        }[kind]
        run_id = f"chaos-{self.name}-{self.made // CALLS_PER_RUN}"
        call = ToolCallEnvelope(
            run_id=run_id,
            tool_call_id=f"c{self.made}",
            tool_name=tool,
            arguments={"seconds": round(seconds, 3)},
        )
        self.made += 1
        run = RunContext(run_id=run_id, authorized_tools=frozenset({SHORT, LONG, LIMITED}))
        cancel = self.rng.uniform(0.3, 2.0) if kind == "cancel" else None
        return Plan(call=call, run=run, cancel_after_s=cancel)

    def think(self) -> float:
        return self.rng.uniform(0.0, 0.1)


class Load:
    """Runs the callers until ``stop``."""

    def __init__(
        self, boundary: ToolBoundary, seed: int, *, sync_callers: int = 3, async_callers: int = 6
    ) -> None:
        self.boundary = boundary
        self.seen = Seen()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._sync_caller,
                args=(Caller(f"s{n}", seed),),
                name=f"caller-s{n}",
                daemon=True,
            )
            for n in range(sync_callers)
        ]
        callers = [Caller(f"a{n}", seed) for n in range(async_callers)]
        self._threads.append(
            threading.Thread(
                target=lambda: asyncio.run(self._async_callers(callers)), name="aio", daemon=True
            )
        )

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    # --- sync ---------------------------------------------------------------------------------

    def _sync_caller(self, caller: Caller) -> None:
        while not self._stop.is_set():
            try:
                self._sync_call(caller.next_plan())
            except Exception as exc:  # a caller's API never raises: count it, go on
                self.seen.failed(exc)
            time.sleep(caller.think())

    def _sync_call(self, plan: Plan) -> None:
        call, b = plan.call, self.boundary
        submission = b.submit(call, plan.run)
        code = submission.outcome and _label(submission.outcome)
        self.seen.submitted(call, submission.accepted, code)
        if not submission.accepted:
            return
        identity = (plan.run.run_id, str(call.tool_call_id))
        if plan.cancel_after_s is not None:
            time.sleep(plan.cancel_after_s)
            self.seen.cancelled(identity, b.cancel(*identity))
        for _ in range(READS):
            outcome = b.outcome(*identity, timeout=WAIT_S)
            self.seen.read(identity, outcome)
            if not outcome.pending or self._stop.is_set():
                return

    # --- async --------------------------------------------------------------------------------

    async def _async_callers(self, callers: list[Caller]) -> None:
        try:
            await asyncio.gather(*(self._async_caller(caller) for caller in callers))
        finally:
            await self.boundary.aclose()

    async def _async_caller(self, caller: Caller) -> None:
        while not self._stop.is_set():
            try:
                await self._async_call(caller.next_plan())
            except Exception as exc:
                self.seen.failed(exc)
            await asyncio.sleep(caller.think())

    async def _async_call(self, plan: Plan) -> Any:
        call, b = plan.call, self.boundary
        submission = await b.asubmit(call, plan.run)
        code = submission.outcome and _label(submission.outcome)
        self.seen.submitted(call, submission.accepted, code)
        if not submission.accepted:
            return
        identity = (plan.run.run_id, str(call.tool_call_id))
        if plan.cancel_after_s is not None:
            await asyncio.sleep(plan.cancel_after_s)
            self.seen.cancelled(identity, await asyncio.to_thread(b.cancel, *identity))
        for _ in range(READS):
            outcome = await b.aoutcome(*identity, timeout=WAIT_S)
            self.seen.read(identity, outcome)
            if not outcome.pending or self._stop.is_set():
                return
