"""Admission: how much of the async calls' own work one event-loop iteration may run.

``asyncio.gather`` over 500 ``ainvoke`` calls makes 500 tasks whose first steps (preflight,
the create script's send) all run in the loop's next iteration: ~70 ms in which no other
task of the loop (a ticker, a token stream, another request) runs. An ``Admission`` belongs
to one loop; each call awaits ``turn()`` before such a step. While the current iteration has
run less than ``budget_s`` of admitted steps, ``turn()`` returns at once; past it the step
waits for a later iteration, in arrival order, and each later iteration admits as many
waiting steps as its budget holds (estimated from the steps measured so far). Other tasks
get the loop between those iterations.

A waiting step costs one future and one wake-up: the work per call does not grow with the
number of calls waiting (no task spins on ``sleep(0)``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from weakref import WeakKeyDictionary

#: Our steps' wall time one loop iteration may run, seconds.
DEFAULT_BUDGET_S = 0.002
#: First estimate of one admitted step, seconds (refined by measurement).
FIRST_STEP_S = 0.0002
#: Weight of the newest measured step in the running estimate.
STEP_WEIGHT = 0.5


class Admission:
    """Admits the async calls' steps to one event loop's iterations, ``budget_s`` a turn."""

    def __init__(
        self, budget_s: float = DEFAULT_BUDGET_S, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.budget_s = budget_s
        self._clock = clock
        self._waiting: deque[asyncio.Future[None]] = deque()
        #: When the current iteration admitted its first step (None: nothing admitted yet).
        self._turn_began: float | None = None
        #: When the last step of this iteration was admitted (its end is the next's start).
        self._last_admitted = 0.0
        #: Running estimate of one step's wall time, seconds.
        self.step_s = FIRST_STEP_S
        self._measured = False
        self._turn_scheduled = False
        #: Steps that waited for a later iteration (for tests and figures).
        self.deferred = 0

    async def turn(self) -> None:
        """Returns when this iteration may run one more of our steps."""
        now = self._clock()
        if not self._waiting:
            if self._turn_began is None:
                self._begin_turn(now)
                return
            self._measure(now)
            if now - self._turn_began < self.budget_s:
                return
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self.deferred += 1
        self._schedule_turn()
        # A cancelled waiter's future is cancelled with it: ``_next_turn`` skips it.
        await future
        now = self._clock()
        if self._turn_began is None:
            self._turn_began = self._last_admitted = now
        else:
            self._measure(now)

    def _begin_turn(self, now: float) -> None:
        self._turn_began = self._last_admitted = now
        self._schedule_turn()

    def _measure(self, now: float) -> None:
        # The previous admitted step ran from its admission until now (at most: other
        # callbacks of the iteration count too, which errs on the side of yielding).
        step = now - self._last_admitted
        if self._measured:
            self.step_s += STEP_WEIGHT * (step - self.step_s)
        else:
            self.step_s, self._measured = step, True
        self._last_admitted = now

    def _schedule_turn(self) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            # Runs after every callback already queued: at the end of this iteration's
            # steps, or (queued by a wake-up) after the steps it woke.
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """A new iteration: wake as many waiting steps as its budget holds (at least one);
        they run in the next iteration, then this runs again after them."""
        self._turn_scheduled = False
        self._turn_began = None
        if not self._waiting:
            return
        admit = max(1, int(self.budget_s / max(self.step_s, 1e-6)))
        while admit and self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_result(None)
                admit -= 1
        self._schedule_turn()

    @property
    def waiting(self) -> int:
        return sum(1 for future in self._waiting if not future.done())


_admissions: WeakKeyDictionary[asyncio.AbstractEventLoop, Admission] = WeakKeyDictionary()


def admission() -> Admission:
    """The running loop's ``Admission`` (made on first use, gone with the loop)."""
    loop = asyncio.get_running_loop()
    got = _admissions.get(loop)
    if got is None:
        got = _admissions[loop] = Admission()
    return got
