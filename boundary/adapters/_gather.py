"""A model turn gathered from frameworks that invoke each tool call on its own.

The Agents SDK and LangGraph's ``ToolNode`` (async) start a turn's parallel tool calls as
concurrent tasks of one event loop, each calling its tool separately. ``gathered_call``
collects the calls that reach one run handle in the same step of the loop (before any of
them waits on I/O) and hands them to ``RunBoundary.acall_many`` as ONE turn: one create
script, one broker round trip, one subscription. A call that arrives later starts the next
turn. Each caller gets its own call's outcome; one caller cancelled stops only its wait.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from boundary.adapters._common import Call
from boundary.handle import RunBoundary
from boundary.models import ToolOutcome

logger = logging.getLogger(__name__)


@dataclass
class _Turn:
    timeout: float | None
    calls: list[Call] = field(default_factory=list)
    waiters: list[asyncio.Future[ToolOutcome]] = field(default_factory=list)


#: The turn being gathered, per run handle and event loop.
_open: WeakKeyDictionary[RunBoundary, dict[asyncio.AbstractEventLoop, _Turn]] = WeakKeyDictionary()
#: The turns' tasks, kept alive until they end.
_running: set[asyncio.Task[None]] = set()


async def gathered_call(
    handle: RunBoundary, call: Call, timeout: float | None = None
) -> ToolOutcome:
    """The call's outcome, the call made as part of the turn gathered in this loop step."""
    loop = asyncio.get_running_loop()
    turns = _open.setdefault(handle, {})
    turn = turns.get(loop)
    if turn is None:
        turn = turns[loop] = _Turn(timeout)
        # Runs after the callbacks already due: the turn's other calls, started together,
        # join it first.
        loop.call_soon(_start, handle, loop, turn)
    waiter: asyncio.Future[ToolOutcome] = loop.create_future()
    turn.calls.append(call)
    turn.waiters.append(waiter)
    return await asyncio.shield(waiter)


def _start(handle: RunBoundary, loop: asyncio.AbstractEventLoop, turn: _Turn) -> None:
    turns = _open.get(handle)
    if turns is not None and turns.get(loop) is turn:
        del turns[loop]
    task = loop.create_task(_run(handle, turn), name="tb-turn")
    _running.add(task)
    task.add_done_callback(_running.discard)


async def _run(handle: RunBoundary, turn: _Turn) -> None:
    calls = [(c.tool_call_id, c.tool_name, c.arguments) for c in turn.calls]
    try:
        outcomes = await handle.acall_many(calls, timeout=turn.timeout)
    except BaseException as error:
        for waiter in turn.waiters:
            if not waiter.done():
                waiter.set_exception(error)
        if not isinstance(error, Exception):
            raise
        return
    for waiter, outcome in zip(turn.waiters, outcomes, strict=True):
        if not waiter.done():
            waiter.set_result(outcome)
