"""What the failover tests share (a Redis Cluster master, a Sentinel master): a boundary and a
worker subprocess with beat on the test's own Redis, a load of calls submitted from a thread,
and the wait until every accepted call has ended."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from boundary import (
    CanonicalKey,
    ErrorCode,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolOutcome,
)
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import create_app
from tests.celery.workers import celery_process, worker_args
from tests.support.helpers import wait_until

#: Each call's tool run, seconds.
TOOL_S = 0.3


@dataclass
class Served:
    """A boundary on the store, and the worker (with beat: the reaper runs) serving it."""

    boundary: ToolBoundary
    worker: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text()[-chars:]


@contextmanager
def served(
    settings: Settings, store: RedisCanonicalStore, tmp_path: Path, name: str
) -> Iterator[Served]:
    """A boundary over ``store`` with the settings' reap terms, and one worker subprocess
    (threads, 8 slots, beat in it) of ``settings`` until the block ends."""
    boundary = ToolBoundary(
        store=store,
        registry=get_runtime().registry,
        dispatcher=CeleryDispatcher(create_app(settings, name=f"tests_{name}")),
        max_pending_s=settings.max_pending_s,
        reap_grace_s=settings.reap_grace_s,
    )
    log = tmp_path / "w.log"
    args = (*worker_args(name, concurrency=8), "-B", "-s", str(tmp_path / "beat"))
    with celery_process(settings, *args, log=log) as worker:
        yield Served(boundary, worker, log)


@dataclass
class Load:
    """``sleepy`` calls submitted one after another from a thread until ``stop``: when each
    accepted one was, and the codes of those refused (a refused submit waits 50 ms)."""

    boundary: ToolBoundary
    #: The run of the n-th call.
    run_of: Callable[[int], RunContext]
    #: The n-th call's id.
    call_id: Callable[[int], str]
    accepted: list[tuple[float, CanonicalKey]] = field(default_factory=list)
    refused: Counter[ErrorCode | None] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._submit, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def accepted_after(self, at: float) -> int:
        return sum(1 for when, _ in list(self.accepted) if when > at)

    def wait_accepted(
        self, count: int, give_up: float, *, after: float = 0.0, log: Path | None = None
    ) -> None:
        """Until ``count`` calls were accepted after ``after`` (monotonic); ``log``: a worker
        log a failure names."""
        wait_until(
            lambda: self.accepted_after(after) >= count,
            f"{count} calls accepted (worker log: {log})",
            give_up - time.monotonic(),
            every=0.05,
        )

    def _submit(self) -> None:
        n = 0
        while not self._stop.is_set():
            run = self.run_of(n)
            envelope = ToolCallEnvelope(
                run_id=run.run_id,
                tool_call_id=self.call_id(n),
                tool_name="sleepy",
                arguments={"seconds": TOOL_S, "n": n},
            )
            n += 1
            submission = self.boundary.submit(envelope, run)
            if submission.accepted:
                assert submission.key is not None
                self.accepted.append((time.monotonic(), submission.key))
            else:
                assert submission.outcome is not None
                self.refused[submission.outcome.error_code] += 1
                time.sleep(0.05)
            time.sleep(0.02)


def outcomes_once_ended(
    boundary: ToolBoundary, calls: list[CanonicalKey], give_up: float
) -> list[ToolOutcome]:
    """The calls' outcomes once none is pending (the test fails at ``give_up``)."""

    def ended() -> tuple[list[ToolOutcome]] | None:
        # (a tuple: no calls at all have ended at once, though an empty list reads as not yet)
        outcomes = [boundary.outcome(k.run_id, k.tool_call_id, timeout=0.05) for k in calls]
        return None if any(o.pending for o in outcomes) else (outcomes,)

    found: tuple[list[ToolOutcome]] = wait_until(
        ended, "every call to end", give_up - time.monotonic(), every=0.5
    )
    return found[0]
