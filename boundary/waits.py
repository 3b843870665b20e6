"""Blocking waits for a call's seal: the one loop they all run (``wait_sealed``; its
event-loop twin is ``aio_calls.await_outcome``), what wakes it, and the boundary's waits.

``ToolBoundary.outcome`` and ``invoke`` (``sync_calls``, on a seal watch or on the
dispatcher), ``invoke_many`` (``turns``) and the Celery result backend that answers a
project task from the record (``tasks.wiring.results.RecordResults.wait_record``) differ
only in how they read and how they are woken; the loop is this one::

    read -> sealed? answer -> time up? the call's state -> wait one slice -> read ...

The record decides: a wake-up is only a reason to read again, unless it carries the
outcome itself (a seal message of this call). The last read comes after the time is up, so
a wait that runs out answers the call's real state, and a missed wake-up costs one slice,
never a hang.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import nullcontext
from typing import Protocol, TypeVar

from boundary import formats
from boundary.call_steps import READ_GRACE_S, outcome_from_message, settled, time_left
from boundary.door import CallTerms
from boundary.errors import StoreError, StoreUnavailable
from boundary.flow import Flow
from boundary.models import CallProgress, CanonicalKey, CanonicalRecord, ToolOutcome
from boundary.store.seal_message import SealMessage
from boundary.store.seal_wait import SyncSealWatch

T = TypeVar("T")

#: One read of the call: its outcome when the record decides it (sealed; or missing or
#: unreadable, for a reader that answers those), else its PROJECTING record, or ``None``
#: for a reader that waits on through a missing one.
Read = Callable[[], ToolOutcome | CanonicalRecord | None]
#: Waits at most the slice given (seconds) for a reason to read again; the outcome when the
#: wake-up carries it (of the PROJECTING record last read, given), else ``None``: read.
Wake = Callable[[float, CanonicalRecord | None], ToolOutcome | None]


def wait_sealed(
    read: Read,
    wake: Wake,
    running: Callable[[CanonicalRecord | None], T],
    *,
    give_up: float | None,
    slice_s: float,
    read_first: bool = True,
) -> ToolOutcome | T:
    """Reads, then waits in slices of at most ``slice_s`` until the call is sealed or the
    monotonic time ``give_up`` passes (``None``: no limit); ``running(record)`` is the
    answer then, made from the last read (``None`` when nothing was read).

    ``read_first`` false: the first slice is waited before any read (the waiter watched the
    call from before its record existed, so no seal can have gone unseen); a wait out of
    time before then still reads once.
    """
    read_now = read_first
    record: CanonicalRecord | None = None
    while True:
        if read_now:
            state = read()
            if isinstance(state, ToolOutcome):
                return state
            record = state
        left = time_left(give_up)
        if left is not None and left <= 0:
            if read_now:
                return running(record)
            read_now = True  # out of time before the first read: read once
            continue
        read_now = True
        done = wake(slice_s if left is None else min(left, slice_s), record)
        if done is not None:
            return done


class SealWatch(Protocol):
    """A watch on one call's seal notification (``store.seal_wait.SyncSealWatch``)."""

    def attach(self, timeout: float | None) -> bool:
        """Subscribes (at most ``timeout`` seconds for the confirmation); True if confirmed."""

    def wait(self, timeout: float | None) -> bool:
        """True when woken (the call's seal message, or a lost connection)."""

    def sealed(self) -> SealMessage | None:
        """The seal message that woke it, if one did."""


def on_seal(watch: SealWatch, *, subscribe: bool = False) -> Wake:
    """Woken by the call's seal notification: its seal message carries the bounded
    outcome (``outcome_from_message``: no read); any other wake-up reads again.

    ``subscribe``: the watch is not attached yet; the first wake-up attaches it (subscribes)
    and reads again before any wait, so a seal between the first read and the subscription
    is seen by that read (and a call sealed already cost no subscription)."""
    attached = not subscribe

    def wake(slice_s: float, record: CanonicalRecord | None) -> ToolOutcome | None:
        nonlocal attached
        if not attached:
            attached = True
            watch.attach(slice_s)
            return None
        if watch.wait(slice_s):
            return outcome_from_message(watch.sealed(), record)
        return None

    return wake


def polling(every_s: float) -> Wake:
    """No notification to wait on: reads again every ``every_s`` at most."""

    def wake(slice_s: float, record: CanonicalRecord | None) -> ToolOutcome | None:
        time.sleep(min(slice_s, every_s))
        return None

    return wake


# --- The boundary's blocking waits on the loop ------------------------------------------


def seal_watch(terms: CallTerms, key: CanonicalKey | None) -> SyncSealWatch | None:
    """A watch on the call's seal when the dispatcher's wait would watch it anyway (its
    ``waits_on_seal``) and the store can (``watch_seal``); else ``None``."""
    watch_seal = getattr(terms.store, "watch_seal", None)
    if key is None or watch_seal is None or not getattr(terms.dispatcher, "waits_on_seal", False):
        return None
    watch: SyncSealWatch | None = watch_seal(key)
    return watch


def await_outcome(
    terms: CallTerms, key: CanonicalKey, give_up: float | None, *, read_first: bool
) -> ToolOutcome:
    """Waits until the monotonic time ``give_up`` for the call's seal (``wait_sealed``):
    woken by its seal notification when the dispatcher's own wait would watch it anyway
    (``seal_watch``: the reads around that wait are saved), else by the dispatcher's wait
    (``on_dispatcher``), in slices of at most ``poll_s``, the record read between slices.

    The record decides, never the dispatcher: the project step seals the record before its
    result is written, so a result seen while the record is still PROJECTING is a stale one
    (of an expired record with the same ids) and only starts a poll of the record.
    """
    watch = seal_watch(terms, key)
    with watch if watch is not None else nullcontext():
        wake, read_now = waking(terms, key, watch, give_up, read_first=read_first)
        return wait_for(terms, key, give_up, wake, read_first=read_now)


def waking(
    terms: CallTerms,
    key: CanonicalKey,
    watch: SyncSealWatch | None,
    give_up: float | None,
    *,
    read_first: bool,
) -> tuple[Wake, bool]:
    """What wakes ``await_outcome``'s wait, and whether it reads before its first slice."""
    if watch is None:
        return on_dispatcher(terms, key), read_first
    if watch.join_covered():
        # Created while the run's channel was subscribed here: no seal of it can have been
        # missed (one that came is held), so no read before the wait.
        return on_seal(watch), False
    if watch.join_subscribed():
        # The run's channel is subscribed already (no round trip): read after it.
        return on_seal(watch), True
    if read_first:
        # Read before subscribing: a call sealed already costs no subscription.
        return on_seal(watch, subscribe=True), True
    watch.attach(wait_slice(terms, time_left(give_up)))
    return on_seal(watch), True


def await_seal(
    terms: CallTerms,
    key: CanonicalKey,
    give_up: float | None,
    watch: SyncSealWatch,
    *,
    read_first: bool,
) -> ToolOutcome:
    """Waits until the monotonic time ``give_up`` for the call's seal with ``watch``
    attached (subscribed, confirmed): ``read_first`` false when the subscription was
    confirmed before the record existed (no seal can have been missed)."""
    return wait_for(terms, key, give_up, on_seal(watch), read_first=read_first)


def wait_for(
    terms: CallTerms, key: CanonicalKey, give_up: float | None, wake: Wake, *, read_first: bool
) -> ToolOutcome:
    """``wait_sealed`` on the call's record (``_read``), woken by ``wake``; a wait that runs
    out answers the call's state, PROJECTING with its progress."""

    done = wait_sealed(
        lambda: _read(terms, key, give_up),
        wake,
        lambda record: record,
        give_up=give_up,
        slice_s=terms.poll_s,
        read_first=read_first,
    )
    if isinstance(done, ToolOutcome):
        return done
    assert done is not None  # _read answers a missing record itself
    return ToolOutcome.running(key.tool_call_id, progress_of(terms, done))


def on_dispatcher(terms: CallTerms, key: CanonicalKey) -> Wake:
    """Woken by the dispatcher's wait (``Dispatcher.wait``) until it is of no use: woken by
    a result (then the record is read: if it is still PROJECTING, that result was stale),
    or back at once (it knows nothing of this call); from then on the record is polled,
    one read a slice, rather than spun on."""
    poll_only = False

    def wake(slice_s: float, record: CanonicalRecord | None) -> ToolOutcome | None:
        nonlocal poll_only
        if poll_only:
            time.sleep(slice_s)
            return None
        started = time.monotonic()
        woken = terms.dispatcher.wait(key, slice_s)
        # A dispatcher of the earlier protocol answers a dict or ``None``.
        if (woken is not None and woken is not False) or (time.monotonic() - started < slice_s / 2):
            poll_only = True
        return None

    return wake


def progress_of(terms: CallTerms, record: CanonicalRecord) -> CallProgress | None:
    """A PROJECTING call's progress: its tool's, or (a limited tool's call that has not
    started) that it waits for a slot, with the calls ahead of it."""
    flow = terms.store.flow
    if isinstance(flow, Flow):
        return flow.progress(record)
    return CallProgress.of(record)


def wait_slice(terms: CallTerms, left: float | None) -> float:
    """One wait's length: ``poll_s``, or less when less time is ``left``."""
    return terms.poll_s if left is None else min(left, terms.poll_s)


#: Threads that make the reads a wait bounds by its timeout (``_bounded_get``).
_bounded_reads: tuple[int, ThreadPoolExecutor] | None = None


def _reader() -> ThreadPoolExecutor:
    """This process's threads for bounded reads (made on first use: a forked child, a
    prefork worker's, gets its own, never its parent's dead ones)."""
    global _bounded_reads
    made = _bounded_reads
    if made is None or made[0] != os.getpid():
        made = (os.getpid(), ThreadPoolExecutor(max_workers=8, thread_name_prefix="tb-read"))
        _bounded_reads = made
    return made[1]


def _read(
    terms: CallTerms, key: CanonicalKey, give_up: float | None = None
) -> ToolOutcome | CanonicalRecord:
    """The call's outcome when its record decides it (sealed, missing, or the store
    unreachable); else its PROJECTING record. A wait's read ends by its ``give_up`` time
    plus ``READ_GRACE_S`` (``STORE_UNAVAILABLE`` when the store is silent that long)."""
    try:
        record = _bounded_get(terms, key, give_up)
    except StoreError as exc:
        return ToolOutcome.error(key.tool_call_id, formats.failure_code(exc))
    done = settled(key, record)
    if done is not None:
        return done
    assert record is not None
    return record


def _bounded_get(
    terms: CallTerms, key: CanonicalKey, give_up: float | None
) -> CanonicalRecord | None:
    """``store.get`` (no raw response), given up past ``give_up`` + ``READ_GRACE_S`` when the
    store's own socket timeout would let it wait longer (a silent, paused Redis): made on a
    thread of ``_reader()`` then, directly otherwise (no hand-off while time is ample).
    Raises ``StoreError`` (``StoreUnavailable`` when given up)."""
    left = time_left(give_up)
    if left is None:
        return terms.store.get(key, with_raw=False)
    bound = max(left, 0.0) + READ_GRACE_S
    socket_s = getattr(terms.store, "read_timeout_s", None)
    if isinstance(socket_s, int | float) and socket_s <= bound:
        return terms.store.get(key, with_raw=False)
    read = _reader().submit(terms.store.get, key, with_raw=False)
    try:
        return read.result(timeout=bound)
    except FutureTimeout:
        read.cancel()
        raise StoreUnavailable() from None
