"""What every adapter shares: a framework-neutral call, running a batch of calls through a run
handle, and the one text a model reads for an outcome."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from boundary import InvocationStatus, RunBoundary, ToolOutcome
from boundary.models import PENDING_TEXT


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call as a framework hands it over: its id exactly as given, the tool's name,
    and the arguments (JSON text, bytes or an already parsed object)."""

    tool_call_id: str | None
    tool_name: str | None
    arguments: Any


def field(item: Any, name: str) -> Any:
    """``item[name]`` for a dict, ``item.name`` for an SDK object; ``None`` when absent."""
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


def is_error(outcome: ToolOutcome | None) -> bool:
    """True for an ERROR outcome (a pending one is not an error: the call may yet succeed)."""
    return outcome is not None and outcome.status is InvocationStatus.ERROR


def outcome_text(outcome: ToolOutcome | None) -> str:
    """The text a model reads for an outcome, as canonical JSON.

    READY: the evidence status, the bounded result and its scope. ERROR: the stable code, its
    fixed sentence and, for a schema refusal, the schema path; never anything raw. ``None``
    (still running after the wait): a fixed PROJECTING note. It is ``ToolOutcome.as_text``,
    so every adapter and server gives a model the same text.
    """
    return PENDING_TEXT if outcome is None else outcome.as_text()


def run_calls(
    handle: RunBoundary, calls: Sequence[Call], timeout: float | None = None
) -> list[ToolOutcome | None]:
    """Runs a model turn's calls side by side: submits them all, then waits for each within
    one shared ``timeout``. ``None`` for a call still running when the time is up."""
    submissions = [handle.submit(c.tool_call_id, c.tool_name, c.arguments) for c in calls]
    give_up = time.monotonic() + (handle.timeout if timeout is None else timeout)
    outcomes: list[ToolOutcome | None] = []
    for call, submission in zip(calls, submissions, strict=True):
        if submission.outcome is not None or submission.key is None:
            outcomes.append(submission.outcome)
            continue
        left = max(give_up - time.monotonic(), 0.0)
        outcomes.append(_settled(handle, call.tool_call_id or "", left))
    return outcomes


async def arun_calls(
    handle: RunBoundary, calls: Sequence[Call], timeout: float | None = None
) -> list[ToolOutcome | None]:
    """``run_calls`` for an event loop: the calls run concurrently, the loop stays free."""
    return list(await asyncio.gather(*(_acall(handle, call, timeout) for call in calls)))


async def _acall(handle: RunBoundary, call: Call, timeout: float | None) -> ToolOutcome | None:
    try:
        return await handle.acall(
            call.tool_call_id, call.tool_name, call.arguments, timeout=timeout
        )
    except TimeoutError:
        return None


def _settled(handle: RunBoundary, tool_call_id: str, timeout: float) -> ToolOutcome | None:
    try:
        return handle.outcome(tool_call_id, timeout=timeout)
    except TimeoutError:
        return None
