"""What every adapter shares: a framework-neutral call, running a batch of calls through a run
handle, and the one text a model reads for an outcome."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from boundary import RunBoundary, ToolOutcome


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


def outcome_text(outcome: ToolOutcome) -> str:
    """The text a model reads for an outcome: ``ToolOutcome.as_text`` (canonical JSON), so
    every adapter and server gives a model the same text."""
    return outcome.as_text()


def run_calls(
    handle: RunBoundary,
    calls: Sequence[Call],
    timeout: float | None = None,
    *,
    replay: bool = False,
) -> list[ToolOutcome]:
    """Runs a model turn's calls side by side: submits them all, then waits for each within
    one shared ``timeout`` (a call still running then is a PROJECTING outcome). The turn goes
    as one (``RunBoundary.call_many``: one create script, one broker round trip, one
    subscription for the waits).

    ``replay=True`` (an agent resumed from a checkpoint): a call already made under its id
    with the same tool and arguments gets the first call's outcome, not ``DUPLICATE_TOOL_CALL``.
    """
    if not replay:
        return handle.call_many(_triples(calls), timeout=timeout)
    # A replayed turn: one by one (each call may be the first one's again).
    submissions = [
        handle.submit(c.tool_call_id, c.tool_name, c.arguments, replay=replay) for c in calls
    ]
    give_up = time.monotonic() + (handle.timeout if timeout is None else timeout)
    outcomes: list[ToolOutcome] = []
    for call, submission in zip(calls, submissions, strict=True):
        if submission.outcome is not None:
            outcomes.append(submission.outcome)
            continue
        left = max(give_up - time.monotonic(), 0.0)
        outcomes.append(handle.outcome(call.tool_call_id or "", timeout=left))
    return outcomes


async def arun_calls(
    handle: RunBoundary,
    calls: Sequence[Call],
    timeout: float | None = None,
    *,
    replay: bool = False,
) -> list[ToolOutcome]:
    """``run_calls`` for an event loop: the calls run concurrently, the loop stays free (a
    turn that is not a replay goes as one: ``RunBoundary.acall_many``)."""
    if not replay:
        return await handle.acall_many(_triples(calls), timeout=timeout)
    return list(
        await asyncio.gather(
            *(
                handle.acall(
                    c.tool_call_id, c.tool_name, c.arguments, timeout=timeout, replay=replay
                )
                for c in calls
            )
        )
    )


def _triples(calls: Sequence[Call]) -> list[tuple[str | None, str | None, Any]]:
    return [(c.tool_call_id, c.tool_name, c.arguments) for c in calls]
