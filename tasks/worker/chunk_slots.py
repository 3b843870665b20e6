"""Re-projection chunks under one fleet-wide cap: the fleet's own flow-control entry
``tool_boundary.reproject`` (``boundary.flow.Reserved``), through the same Lua scripts,
run-time overrides (``tool-boundary limits set``) and views (``tool-boundary limits``, the web
view's ``/limits``) as a limited tool.

Each lane of a job is one holder (``<job_id>:lane-<n>``), its tenant the job, so jobs take
turns for the slots (round-robin) and a job's lanes show in ``limits`` by job. A chunk that
cannot have a slot waits in the entry's line in Redis and its task ends: no worker thread is
held, nothing polls. Whoever frees a slot (a chunk's end, the sweep, ``limits set``) sends
the next lane in line its chunk, with the slot's attempt. A chunk holds its slot as a lease
(``TOOL_BOUNDARY_REPROJECT_LEASE_S``) and renews it from a thread of its own while it works;
the reaper's sweep frees a lease not renewed in time (its worker died or stalled). The
attempt is a fencing token that only counts up per lane (``RedisJobs.next_slot``): a stale
holder's renewal and release are refused, never touching another chunk's slot.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from boundary import CanonicalKey, StoreError
from boundary.flow import RELEASE_RENEWED, Flow, Reserved
from boundary.reprojection import failures_why
from boundary.store.flow import Admitted, FlowStanding, FlowState, ToolLimits
from boundary.store.redis_jobs import Checkpoint, Job, RedisJobs
from tasks.settings import Settings
from tasks.wiring.app import REPROJECT_CHUNK, REPROJECTIONS_QUEUE, app

logger = logging.getLogger(__name__)

#: The flow-control entry of re-projection chunks (a reserved name, not a tool).
REPROJECT_SLOTS = "tool_boundary.reproject"
#: A lane's holder id is ``<job_id>:lane-<n>`` (a canonical identity's shape).
LANE_PREFIX = "lane-"
#: Renewals of a lease per lease period (a renewal may be late by two thirds of it).
RENEWALS_PER_LEASE = 3
#: Times a chunk frees its lane's expired lease and asks again, in one task.
TAKEOVERS = 1
#: Added to the time left of a live holder's lease before a chunk comes back, seconds.
AGAIN_MARGIN_S = 0.5
#: Tries at giving a slot up, and the first pause between two, seconds (doubling). A slot
#: not given up is freed by the sweep when its lease runs out.
RELEASE_ATTEMPTS = 3
RELEASE_RETRY_S = 0.2


def lane_key(job_id: str, lane: int) -> CanonicalKey:
    return CanonicalKey(run_id=job_id, tool_call_id=f"{LANE_PREFIX}{lane}")


def lane_of(key: CanonicalKey) -> tuple[str, int] | None:
    """``(job_id, lane)`` of a holder's key, ``None`` for one this module did not make."""
    number = key.tool_call_id.removeprefix(LANE_PREFIX)
    if number == key.tool_call_id or not number.isdigit():
        return None
    return key.run_id, int(number)


def entry_limits(settings: Settings) -> ToolLimits:
    return ToolLimits(
        concurrency=settings.reproject_concurrency, lease_s=settings.reproject_lease_s
    )


def send_chunk(
    job_id: str,
    lane: int,
    *,
    slot: int | None = None,
    seen: int | None = None,
    countdown_s: float = 0.0,
) -> None:
    """Sends a chunk of the lane to the ``reprojections`` queue: ``slot``, the attempt it
    holds a slot for (sent from the line); ``seen``, the attempt it found holding its lane
    (it comes back to see whether that holder still lives)."""
    kwargs = {k: v for k, v in (("slot", slot), ("seen", seen)) if v is not None}
    app.send_task(
        REPROJECT_CHUNK,
        args=(job_id, lane),
        kwargs=kwargs,
        queue=REPROJECTIONS_QUEUE,
        countdown=countdown_s or None,
        argsrepr=repr((job_id, lane)),
        kwargsrepr=repr(kwargs),
    )


def _send_granted(key: CanonicalKey, attempt: int) -> None:
    found = lane_of(key)
    if found is None:
        raise ValueError("not a lane's holder")
    send_chunk(*found, slot=attempt)


def reserve(flow: Flow, settings: Settings) -> None:
    """Makes the re-projection entry known to ``flow`` (once per process)."""
    if REPROJECT_SLOTS not in flow.reserved:
        flow.reserve(
            Reserved(name=REPROJECT_SLOTS, limits=entry_limits(settings), send=_send_granted)
        )


class Hold:
    """A chunk's slot: renewed from a thread while the chunk works, given up once."""

    def __init__(self, flow: Flow, key: CanonicalKey, attempt: int, lease_s: float) -> None:
        self.flow, self.key, self.attempt = flow, key, attempt
        self._every_s = lease_s / RENEWALS_PER_LEASE
        self._stop = threading.Event()
        #: Whether a renewal was refused: the sweep freed the lease (this chunk stalled past
        #: it) and the slot may be another chunk's now.
        self.lost = False
        self._thread = threading.Thread(target=self._renew, name="tb-chunk-lease", daemon=True)

    def __enter__(self) -> Hold:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._every_s + 5)
        self.release()

    def _renew(self) -> None:
        entry = self.flow.reserved[REPROJECT_SLOTS]
        while not self._stop.wait(self._every_s):
            try:
                held = self.flow.ops.renew(REPROJECT_SLOTS, entry.limits, self.key, self.attempt)
            except StoreError:
                logger.warning("chunk %s: lease not renewed (store)", self.key.identity)
                continue
            if not held:
                self.lost = True
                logger.warning(
                    "chunk %s: attempt %d lost its slot (lease expired); it finishes, fenced",
                    self.key.identity,
                    self.attempt,
                )
                with contextlib.suppress(StoreError):  # a count only
                    self.flow.ops.note_stale(REPROJECT_SLOTS)
                return

    def release(self) -> None:
        """Gives the slot up (only this attempt's: fenced) and sends the lanes handed a slot.
        A store that does not answer leaves it to the sweep, when the lease runs out."""
        limits = self.flow.reserved[REPROJECT_SLOTS].limits
        for tried in range(RELEASE_ATTEMPTS):
            try:
                self.flow.release(self.key, REPROJECT_SLOTS, limits, attempt=self.attempt)
                return
            except StoreError:
                if tried + 1 < RELEASE_ATTEMPTS:
                    time.sleep(RELEASE_RETRY_S * 2**tried)
        logger.warning("chunk %s: slot not given up (store); freed at its lease's end",
                       self.key.identity)  # fmt: skip


@dataclass(frozen=True)
class Taken:
    """What a chunk's request for a slot came to: a ``hold`` to work under, or why not."""

    hold: Hold | None
    #: ``waiting`` (in line; sent when a slot frees), ``again`` (its lane's slot is held by
    #: a live holder: it comes back when that lease would run out), ``duplicate`` (its lane
    #: waits or runs already), ``gone``.
    state: str = "holds"


def take(
    flow: Flow,
    jobs: RedisJobs,
    job_id: str,
    lane: int,
    *,
    slot: int | None,
    seen: int | None,
    on_again: Callable[[int, float], None],
) -> Taken:
    """A chunk's slot: the one it was sent with (``slot``) while it still holds it, else a
    new request. ``on_again(holder, delay_s)`` sends the chunk back later (its lane's slot
    is held by a live holder, or the line is full). Raises ``StoreError``."""
    entry = flow.reserved[REPROJECT_SLOTS]
    limits, key = entry.limits, lane_key(job_id, lane)
    lease_s = limits.lease_s or 0.0
    if slot is not None and flow.ops.renew(REPROJECT_SLOTS, limits, key, slot):
        return _held(flow, key, slot, lease_s)
    # Sent from the line but its lease ran out before it started (a long queue), or a new
    # chunk: asks like any other.
    for _ in range(TAKEOVERS + 1):
        attempt = jobs.next_slot(job_id, lane)
        if attempt == 0:
            return Taken(None, "gone")
        reply = flow.ops.admit(
            REPROJECT_SLOTS,
            limits,
            key,
            attempt=attempt,
            tenant=job_id,
            priority=0,
            deadline=None,
            record_exists=True,
        )
        flow.deliver(REPROJECT_SLOTS, reply)
        flow.announce(REPROJECT_SLOTS, limits)
        admitted = reply.admitted
        if admitted is Admitted.GRANTED:
            return _held(flow, key, attempt, lease_s)
        if admitted is Admitted.WAITING:
            return Taken(None, "waiting")
        if admitted is Admitted.WAITS:
            return Taken(None, "duplicate")
        if admitted is not Admitted.HOLDS:
            # BUSY: an operator's --max-waiting on the cap: it comes back after a lease.
            on_again(0, lease_s)
            return Taken(None, "again")
        # Another chunk of this lane holds a slot: a duplicate message beside a live chunk
        # (that holder has moved on by the time this one comes back: it is dropped), or a
        # chunk whose worker died or stalled: once its lease has run out unrenewed, this
        # chunk frees it (fenced by the holder's attempt, as the sweep would) and asks again.
        holder = flow.ops.state(REPROJECT_SLOTS, limits, key).attempt
        if seen is not None and holder != seen:
            return Taken(None, "duplicate")
        freed = flow.ops.release(REPROJECT_SLOTS, limits, key, attempt=holder, expired=True)
        if freed.code == RELEASE_RENEWED:
            left_s = max(freed.wake_at_ms - freed.now_ms, 0) / 1000
            on_again(holder, left_s + AGAIN_MARGIN_S)
            return Taken(None, "again")
        flow.deliver(REPROJECT_SLOTS, freed)
        if freed.code == 1:
            logger.warning("chunk %s: attempt %d's lease had run out: freed", key.identity, holder)
    on_again(0, lease_s)
    return Taken(None, "again")


def _held(flow: Flow, key: CanonicalKey, attempt: int, lease_s: float) -> Taken:
    flow.started(key, REPROJECT_SLOTS, attempt)  # the entry's rate window, when it has one
    return Taken(Hold(flow, key, attempt, lease_s))


def log_failures(jobs: RedisJobs, job_id: str, code: int) -> None:
    """Once a job, by the process whose checkpoint finished it (``Checkpoint.FINISHED``: a
    worker's chunk, or a cancel's ``withdraw`` in the CLI or the web view): one WARNING
    per tool, code and diagnostic (exception type and frame, never the message) of the
    job's failed projections, with how many records failed so in the whole job."""
    if code != Checkpoint.FINISHED:
        return
    job = jobs.get(job_id)
    if job is None:
        return
    for tool, error_code, why, times in failures_why(job.totals):
        logger.warning(
            "job %s: projector of tool %s failed on %d record(s): %s, %s",
            job_id,
            tool,
            times,
            error_code,
            why,
        )


def withdraw(flow_ops: Any, jobs: RedisJobs, job_id: str) -> list[int]:
    """A cancelled job's lanes waiting at the cap leave its line (one atomic step where the
    line lives, ``flow/withdraw.lua``), so the next job's lanes are not queued behind them,
    and each of them ends where its cursor is (a checkpoint of nothing: the job is
    cancelling), as its chunk would have once granted a slot. A lane holding a slot is left
    to stop at its next chunk boundary and give the slot up then. The lanes taken out, in
    order. Raises ``StoreError``."""
    taken = flow_ops.withdraw(REPROJECT_SLOTS, ToolLimits(), job_id)
    lanes = sorted({found[1] for key, _ in taken if (found := lane_of(key)) and found[0] == job_id})
    job = jobs.get(job_id) if lanes else None
    for lane in lanes:
        if job is not None and lane in job.cursors and lane not in job.ended:
            cursor = job.cursors[lane]
            code = jobs.checkpoint(job_id, lane, before=cursor, after=cursor, totals={}, lines=[])
            log_failures(jobs, job_id, code)
    return lanes


def cancel(store: Any, jobs: RedisJobs, job_id: str) -> str | None:
    """Asks the job to stop (``RedisJobs.cancel``: each lane at its next checkpoint) and,
    when it was running, takes its lanes waiting at the cap out of the line (``withdraw``).
    The job's state before (``None``: no such job). Raises ``StoreError``."""
    state = jobs.cancel(job_id)
    flow_ops = getattr(store, "flow_ops", None)
    if state == "running" and flow_ops is not None:
        withdraw(flow_ops, jobs, job_id)
    return state


def lane_states(flow_ops: Any, job: Job) -> dict[int, FlowState]:
    """Where each lane of a running job stands at the cap (one round trip a lane)."""
    if not job.active:
        return {}
    return {
        lane: flow_ops.state(REPROJECT_SLOTS, ToolLimits(), lane_key(job.job_id, lane))
        for lane in range(job.lanes)
        if lane not in job.ended
    }


def slots_view(states: dict[int, FlowState]) -> dict[str, Any]:
    """``jobs show``'s ``slots``: lanes holding a slot, lanes waiting for one (and the
    fewest chunks ahead of one of them)."""
    waiting = [s for s in states.values() if s.standing is FlowStanding.WAITS]
    ahead = [s.ahead for s in waiting if s.ahead is not None]
    return {
        "cap": REPROJECT_SLOTS,
        "holding": sum(s.standing is FlowStanding.HOLDS for s in states.values()),
        "waiting": len(waiting),
        "ahead": min(ahead) if ahead else None,
    }


def slots_text(view: dict[str, Any]) -> str:
    """``1 lane(s) holding a slot, 2 waiting for a slot (3 ahead)``, for ``jobs show``."""
    text = f"{view['holding']} lane(s) holding a slot"
    if view["waiting"]:
        ahead = "" if view["ahead"] is None else f" ({view['ahead']} ahead)"
        text += f", {view['waiting']} waiting for a slot of {view['cap']}{ahead}"
    return text
