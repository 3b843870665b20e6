"""Progress while a call runs: ``notifications/progress`` for a plain call that asked for them
(they keep it alive in clients that reset their timeout on progress), and the watcher of a task
created on a connection that lives on (stdio): its progress, then its status when it ends."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.context import ServerRequestContext

from boundary import CanonicalKey, ToolOutcome
from tasks.mcp_server.calls import BoundaryCalls

logger = logging.getLogger(__name__)


def progress_of(outcome: ToolOutcome) -> tuple[float | None, str | None]:
    """A PROJECTING outcome's heartbeat fraction and message (``ToolOutcome.progress``, from
    the tool's ``heartbeat()``), when it has them."""
    progress = outcome.progress
    if progress is None:
        return None, None
    return progress.fraction, progress.message or None


def progress_token(ctx: ServerRequestContext[Any, Any]) -> str | int | None:
    """The request's ``_meta.progressToken``, if it asked for progress."""
    raw_meta = (ctx.params or {}).get("_meta")
    token = raw_meta.get("progressToken") if isinstance(raw_meta, dict) else None
    return token if isinstance(token, str | int) else None


class Ticker:
    """The values of successive progress notifications: the tool's heartbeat fraction (total
    1.0) when it has one, a keep-alive count (no total) otherwise; always increasing."""

    def __init__(self) -> None:
        self.ticks = 0
        self.last = 0.0

    def next(self, waited: ToolOutcome) -> tuple[float, float | None, str | None]:
        self.ticks += 1
        fraction, message = progress_of(waited)
        if fraction is not None:
            # Progress must increase with each notification, even when the tool's fraction
            # has not moved since the last heartbeat.
            value, total = max(fraction, min(self.last + 1e-6, 1.0)), 1.0
        else:
            value, total = float(self.ticks), None
        self.last = value
        return value, total, message


async def wait_plain(
    ctx: ServerRequestContext[Any, Any],
    calls: BoundaryCalls,
    key: CanonicalKey,
    *,
    call_wait_s: float,
    progress_s: float,
) -> ToolOutcome | None:
    """Waits for the outcome up to ``call_wait_s`` (``None`` after it); meanwhile, when the
    request carries a ``progressToken``, sends ``notifications/progress`` every
    ``progress_s / 2``."""
    wants_progress = progress_token(ctx) is not None
    deadline = time.monotonic() + call_wait_s
    # Half the interval per wait: a notification's own latency never makes a gap reach it.
    slice_s = progress_s / 2
    ticker = Ticker()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        waited = await calls.wait(key, min(slice_s, left))
        if not waited.pending:
            return waited
        if wants_progress:
            await ctx.session.report_progress(*ticker.next(waited))


class Watchers:
    """Background watchers of tasks, kept so they are not collected."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()

    def watch(
        self,
        ctx: ServerRequestContext[Any, Any],
        calls: BoundaryCalls,
        key: CanonicalKey,
        progress_s: float,
        on_end: Callable[[], Awaitable[None]],
    ) -> None:
        """Until the call ends: ``notifications/progress`` when its request carried a
        ``progressToken`` (the spec: the token stays valid for the task's lifetime), every
        ``progress_s / 2``; then ``on_end`` (the status notification). The client must not
        rely on either, so a failure to send is dropped."""
        token = progress_token(ctx)

        async def watch() -> None:
            try:
                ticker = Ticker()
                while True:
                    waited = await calls.wait(key, progress_s / 2)
                    if not waited.pending:
                        break
                    if token is not None:
                        value, total, message = ticker.next(waited)
                        await ctx.session.send_progress_notification(token, value, total, message)
                await on_end()
            except Exception as exc:
                logger.debug("task status not sent: %s", type(exc).__name__)

        watcher = asyncio.get_running_loop().create_task(watch())
        self._running.add(watcher)
        watcher.add_done_callback(self._running.discard)
