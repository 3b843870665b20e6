"""A model turn gathered from frameworks that invoke each tool call on its own.

The Agents SDK and LangGraph's ``ToolNode`` (async) start a turn's parallel tool calls as
concurrent tasks of one event loop, each calling its tool separately. ``gathered_call``
collects the calls that reach one run handle in the same step of the loop (before any of
them waits on I/O) and hands them to ``RunBoundary.acall_many`` as ONE turn: one create
script, one broker round trip, one subscription. A call that arrives later starts the next
turn. Each caller gets its own call's outcome; one caller cancelled stops only its wait.

LangGraph's sync ``ToolNode`` runs a turn's calls on a thread pool instead:
``gathered_call_sync`` collects the calls that reach one handle from those threads while the
first waits (briefly) for the others its model turn lists, and sends them as one turn
(``RunBoundary.call_many``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
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


#: Longest wait of a sync turn's first call for the others its model turn lists, seconds:
#: a call that cannot come (the framework runs fewer calls at once than the turn has) costs
#: the turn this much, never a hang.
SYNC_WINDOW_S = 0.005


@dataclass
class _SyncTurn:
    """A turn gathered from threads: the first call's thread sends it for all."""

    #: Call ids the first call's model turn lists for this handle (itself included).
    expected: frozenset[str]
    calls: list[Call] = field(default_factory=list)
    #: Set once every expected call joined (the first call then stops waiting).
    full: threading.Event = field(default_factory=threading.Event)
    #: Set once the outcomes (or the error) are in.
    done: threading.Event = field(default_factory=threading.Event)
    closed: bool = False
    outcomes: list[ToolOutcome] | None = None
    error: BaseException | None = None

    def ids(self) -> set[str | None]:
        return {c.tool_call_id for c in self.calls}


_sync_lock = threading.Lock()
#: The turn being gathered from threads, per run handle.
_sync_open: WeakKeyDictionary[RunBoundary, _SyncTurn] = WeakKeyDictionary()


def gathered_call_sync(
    handle: RunBoundary,
    call: Call,
    expected: frozenset[str],
    *,
    window_s: float | None = None,
    timeout: float | None = None,
) -> ToolOutcome:
    """The call's outcome, the call made with the others of its model turn that reach
    ``handle`` from other threads meanwhile (LangGraph's sync ``ToolNode`` runs a turn's calls
    on a thread pool), as ONE turn (``RunBoundary.call_many``).

    ``expected``: the ids the model's turn lists for this handle. The first call waits until
    they all joined, at most ``window_s`` (``SYNC_WINDOW_S`` when None); only calls that did
    join are sent (none is made for a thread that has not asked), and one that comes later
    starts the next turn. A turn of one call (``expected`` is only it) goes at once."""
    with _sync_lock:
        turn = _sync_open.get(handle)
        first = turn is None or turn.closed or call.tool_call_id in turn.ids()
        if first:
            turn = _SyncTurn(expected | {call.tool_call_id or ""})
            _sync_open[handle] = turn
        assert turn is not None
        index = len(turn.calls)
        turn.calls.append(call)
        if turn.expected <= turn.ids():
            turn.full.set()
    if first:
        _send_sync(handle, turn, SYNC_WINDOW_S if window_s is None else window_s, timeout)
    else:
        turn.done.wait()
    if turn.error is not None:
        raise turn.error
    assert turn.outcomes is not None
    return turn.outcomes[index]


def _send_sync(
    handle: RunBoundary, turn: _SyncTurn, window_s: float, timeout: float | None
) -> None:
    turn.full.wait(window_s)
    with _sync_lock:
        turn.closed = True
        if _sync_open.get(handle) is turn:
            del _sync_open[handle]
        calls = [(c.tool_call_id, c.tool_name, c.arguments) for c in turn.calls]
    try:
        turn.outcomes = handle.call_many(calls, timeout=timeout)
    except BaseException as error:
        turn.error = error
        raise
    finally:
        turn.done.set()
