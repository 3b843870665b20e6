"""The demo's long calls: what the boundary is for, shown on the embedded default.

Three calls of ``scan_metrics`` (``tasks.demo.long_scan``) run side by side on the ``long``
queue while the terminal shows their progress bars: one runs to its end; one is cancelled
mid-way (``ToolBoundary.cancel``: sealed CANCELLED, and the tool stops at its next
heartbeat); one goes silent on its first attempt as a dead worker would, is found lost by the
reaper after its heartbeat timeout and ends READY on attempt 2. Beside them, two calls of
``audit_metrics`` (the same tool limited to one at a time across the fleet): the second waits
for the first's slot, in Redis, and says so ("waiting for a slot").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from boundary import (
    CanonicalKey,
    CanonicalRecord,
    ErrorCode,
    InvocationStatus,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.flow import waiting_progress

#: The long tool of the demo, and the same limited to one call at a time (flow control).
LONG_TOOL = "scan_metrics"
LIMITED_TOOL = "audit_metrics"
#: The cancelled call is cancelled once this far along.
CANCEL_AT = 0.3
#: Longest the long calls may take together before the demo calls them stuck, seconds.
LONG_TIMEOUT_S = 25.0
#: How often the terminal's bars are redrawn (one read of the three records), seconds.
POLL_S = 0.2
#: How often the demo's own reaper pass runs (beat's job in production), seconds.
REAP_EVERY_S = 0.5


@dataclass(frozen=True)
class LongStep:
    label: str
    tool_call_id: str
    arguments: dict[str, Any]
    expect_status: InvocationStatus
    expect_error: ErrorCode | None = None
    expect_attempt: int = 1
    cancel: bool = False
    tool: str = LONG_TOOL
    #: It must be seen waiting for a slot of its limited tool at some point.
    expect_wait: bool = False


#: The long calls, started together.
LONG_SCRIPT: tuple[LongStep, ...] = (
    LongStep(
        "long report, live progress",
        "call_scan_1",
        {"pages": 24, "page_s": 0.2},
        InvocationStatus.READY,
    ),
    LongStep(
        "cancelled mid-way",
        "call_scan_2",
        {"pages": 60, "page_s": 0.2},
        InvocationStatus.ERROR,
        ErrorCode.CANCELLED,
        cancel=True,
    ),
    LongStep(
        "worker lost, retried",
        "call_scan_3",
        {"pages": 16, "page_s": 0.15, "simulate_lost_worker": True},
        InvocationStatus.READY,
        expect_attempt=2,
    ),
    LongStep(
        "one at a time (limited)",
        "call_audit_1",
        {"pages": 10, "page_s": 0.2},
        InvocationStatus.READY,
        tool=LIMITED_TOOL,
    ),
    LongStep(
        "waits for a slot",
        "call_audit_2",
        {"pages": 10, "page_s": 0.2},
        InvocationStatus.READY,
        tool=LIMITED_TOOL,
        expect_wait=True,
    ),
)


#: What the terminal draws of one long call: its step, its record, and "waiting for a slot
#: (N ahead)" while it waits in its limited tool's line.
LongView = tuple[LongStep, CanonicalRecord | None, str | None]


@dataclass
class LongReport:
    step: str
    tool_call_id: str
    status: str
    error_code: str | None
    attempt: int
    #: The progress message when the call was cancelled (where its tool stopped).
    stopped_at: str | None
    seconds: float
    expected: bool
    #: It was seen waiting for a slot of its limited tool.
    waited: bool = False


def run_long_calls(
    boundary: ToolBoundary,
    run: RunContext,
    on_progress: Callable[[list[LongView]], None] | None = None,
) -> list[LongReport]:
    """Starts the long calls, follows them (cancelling one), returns how each ended."""
    started = time.monotonic()
    for step in LONG_SCRIPT:
        envelope = ToolCallEnvelope(
            run_id=run.run_id,
            tool_call_id=step.tool_call_id,
            tool_name=step.tool,
            arguments=step.arguments,
        )
        boundary.submit(envelope, run)
    keys = {
        s.tool_call_id: CanonicalKey(run_id=run.run_id, tool_call_id=s.tool_call_id)
        for s in LONG_SCRIPT
    }
    stopped: dict[str, str | None] = {}
    ended: dict[str, float] = {}
    records: dict[str, CanonicalRecord | None] = {}
    waited: set[str] = set()
    while time.monotonic() - started < LONG_TIMEOUT_S:
        records = {c: boundary.store.get(k, with_raw=False) for c, k in keys.items()}
        waiting = {c: _waiting(boundary, r) for c, r in records.items()}
        waited |= {c for c, w in waiting.items() if w is not None}
        now = time.monotonic() - started
        for step in LONG_SCRIPT:
            record = records[step.tool_call_id]
            if record is not None and record.status is not InvocationStatus.PROJECTING:
                ended.setdefault(step.tool_call_id, now)
            elif step.cancel and record is not None and (record.progress or 0) >= CANCEL_AT:
                stopped[step.tool_call_id] = record.progress_message
                boundary.cancel(run.run_id, step.tool_call_id)
        if on_progress is not None:
            on_progress(
                [(s, records[s.tool_call_id], waiting[s.tool_call_id]) for s in LONG_SCRIPT]
            )
        if len(ended) == len(LONG_SCRIPT):
            break
        time.sleep(POLL_S)
    return [
        _report(s, records.get(s.tool_call_id), stopped, ended, s.tool_call_id in waited)
        for s in LONG_SCRIPT
    ]


def _waiting(boundary: ToolBoundary, record: CanonicalRecord | None) -> str | None:
    """ "waiting for a slot (N ahead)" while a limited tool's call waits in its line."""
    ops = getattr(boundary.store, "flow_ops", None)
    if record is None or record.started_at is not None or ops is None:
        return None
    if record.status is not InvocationStatus.PROJECTING:
        return None
    progress = waiting_progress(ops, record)
    return progress.message if progress is not None and progress.waiting else None


def _report(
    step: LongStep,
    record: CanonicalRecord | None,
    stopped: dict[str, str | None],
    ended: dict[str, float],
    waited: bool,
) -> LongReport:
    status = "MISSING" if record is None else record.status.value
    code = record.error_code if record is not None else None
    attempt = record.attempt if record is not None else 0
    return LongReport(
        step=step.label,
        tool_call_id=step.tool_call_id,
        status="TIMEOUT" if status == "PROJECTING" else status,
        error_code=code.value if code else None,
        attempt=attempt,
        stopped_at=stopped.get(step.tool_call_id),
        seconds=round(ended.get(step.tool_call_id, LONG_TIMEOUT_S), 1),
        expected=status == step.expect_status.value
        and code is step.expect_error
        and attempt == step.expect_attempt
        and (waited or not step.expect_wait),
        waited=waited,
    )


@contextmanager
def reaper_thread(reap: Callable[[], Any]) -> Iterator[None]:
    """Runs a reaper pass every ``REAP_EVERY_S`` while the block runs: what beat does for a
    fleet, here so the embedded demo finds its lost call without one."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(REAP_EVERY_S):
            reap()

    thread = threading.Thread(target=loop, name="demo-reaper", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)
