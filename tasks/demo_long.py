"""The demo's long calls: what the boundary is for, shown on the embedded default.

Three calls of ``scan_metrics`` (``examples.long_scan``) run side by side on the ``long``
queue while the terminal shows their progress bars: one runs to its end; one is cancelled
mid-way (``ToolBoundary.cancel``: sealed CANCELLED, and the tool stops at its next
heartbeat); one goes silent on its first attempt as a dead worker would, is found lost by the
reaper after its heartbeat timeout and ends READY on attempt 2.
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

#: The long tool of the demo.
LONG_TOOL = "scan_metrics"
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


#: The long calls, started together. (Flow control adds calls of a limited tool that wait
#: for a slot here: a ``LongStep`` each, shown as "waiting for a slot (N ahead)".)
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
)


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


def run_long_calls(
    boundary: ToolBoundary,
    run: RunContext,
    on_progress: Callable[[list[tuple[LongStep, CanonicalRecord | None]]], None] | None = None,
) -> list[LongReport]:
    """Starts the long calls, follows them (cancelling one), returns how each ended."""
    started = time.monotonic()
    for step in LONG_SCRIPT:
        envelope = ToolCallEnvelope(
            run_id=run.run_id,
            tool_call_id=step.tool_call_id,
            tool_name=LONG_TOOL,
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
    while time.monotonic() - started < LONG_TIMEOUT_S:
        records = {c: boundary.store.get(k, with_raw=False) for c, k in keys.items()}
        now = time.monotonic() - started
        for step in LONG_SCRIPT:
            record = records[step.tool_call_id]
            if record is not None and record.status is not InvocationStatus.PROJECTING:
                ended.setdefault(step.tool_call_id, now)
            elif step.cancel and record is not None and (record.progress or 0) >= CANCEL_AT:
                stopped[step.tool_call_id] = record.progress_message
                boundary.cancel(run.run_id, step.tool_call_id)
        if on_progress is not None:
            on_progress([(s, records[s.tool_call_id]) for s in LONG_SCRIPT])
        if len(ended) == len(LONG_SCRIPT):
            break
        time.sleep(POLL_S)
    return [_report(s, records.get(s.tool_call_id), stopped, ended) for s in LONG_SCRIPT]


def _report(
    step: LongStep,
    record: CanonicalRecord | None,
    stopped: dict[str, str | None],
    ended: dict[str, float],
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
        and attempt == step.expect_attempt,
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
