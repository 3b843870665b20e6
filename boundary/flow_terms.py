"""The terms of fleet flow control (``boundary.flow``): its constants, what a waiting call's
progress says, the fleet's own entries (``Reserved``), and what flow control needs of a sender
and a store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from boundary.errors import ErrorCode
from boundary.models import CallProgress, CanonicalKey, CanonicalRecord
from boundary.store.flow import FlowStanding, ToolLimits

if TYPE_CHECKING:
    from boundary.store.redis_flow import RedisFlow

#: Seconds a process keeps the store's list of run-time overrides before reading it again.
OVERRIDES_TTL_S = 1.0
#: Seconds between two notes of a tool in the index of limited tools by one process (its
#: first admitted call notes it at once): one write a minute at most, off the hot path.
ANNOUNCE_EVERY_S = 60.0
#: How long an entry of the index of limited tools lives without a new note, when the store
#: does not say its records' TTL, seconds.
ANNOUNCE_TTL_S = 24 * 3600.0
#: Added to a wake-up's delay, seconds, so it never comes a hair before its time.
WAKE_MARGIN_S = 0.005
#: Tries at giving a sealed call's slot up (a release is idempotent), or at counting a start,
#: and the first pause between two, seconds (doubling): a blip shorter than that does not
#: leave the slot to the reaper's check.
RELEASE_ATTEMPTS = 3
RELEASE_RETRY_S = 0.2
#: ``release.lua``'s code when another attempt holds the call's slot: the release named a
#: stale attempt and gave nothing up.
RELEASE_STALE = -2
#: ``release.lua``'s code when a reserved entry's lease found expired was renewed since:
#: its holder lives, and keeps it.
RELEASE_RENEWED = -3
#: Flow-control entries named so are the fleet's own (``Reserved``), not tools.
RESERVED_PREFIX = "tool_boundary."
#: What a waiting call's progress says (``CallProgress.message``).
WAITING_MESSAGE = "waiting for a slot"


def waiting_message(ahead: int | None) -> str:
    """``waiting for a slot (3 ahead)``, or without the count when it is not known."""
    return WAITING_MESSAGE if ahead is None else f"{WAITING_MESSAGE} ({ahead} ahead)"


def waiting_progress(
    ops: RedisFlow, record: CanonicalRecord, limits: ToolLimits | None = None
) -> CallProgress | None:
    """The progress of a PROJECTING call that has not started, read from its tool's flow
    control (one round trip): ``waiting`` with the calls ahead of it while it waits for a
    slot, else what its record says. Needs no registry (the CLI): a tool without flow
    control has no call in line. Raises ``StoreError``."""
    if record.started_at is None:
        state = ops.state(record.tool_name, limits or ToolLimits(), record.key)
        if state.standing in (FlowStanding.WAITS, FlowStanding.ADMITTED):
            return CallProgress(
                message=waiting_message(state.ahead),
                attempt=record.attempt,
                waiting=True,
                ahead=state.ahead,
            )
    return CallProgress.of(record)


def is_reserved(name: str) -> bool:
    """Whether ``name`` is one of the fleet's own entries (``RESERVED_PREFIX``)."""
    return name.startswith(RESERVED_PREFIX)


@dataclass(frozen=True)
class Reserved:
    """A flow-control entry that limits work other than tool calls (re-projection chunks:
    ``tasks.worker.chunk_slots``), through the same scripts, overrides and views as a tool.

    Its holders have no call record for the sweep to read: a holder renews its lease while
    it works (``RedisFlow.renew``, fenced by its attempt), and the sweep frees a lease left
    unrenewed past ``limits.lease_s`` (``boundary.reaper``). A holder handed a slot from the
    line is sent by ``send``.
    """

    name: str
    #: The declared limits (``lease_s`` set: a lease its holder renews).
    limits: ToolLimits
    #: Sends the holder ``key`` handed a slot for its attempt (raises when it cannot).
    send: Callable[[CanonicalKey, int], None]


class Sender(Protocol):
    """Sends a call's execute step (a dispatcher; ``boundary.steps.AttemptSender``)."""

    def send_attempt(
        self, key: CanonicalKey, *, attempt: int, queue: str, countdown_s: float = 0.0
    ) -> None: ...


@runtime_checkable
class WakeScheduler(Protocol):
    """A sender that can also pump a tool's line later, in some worker (optional): Celery
    sends a task with a countdown. Without it, a timer thread of this process does it."""

    def schedule_wake(self, tool: str, delay_s: float) -> None: ...


class FlowStore(Protocol):
    """What flow control needs of a store: its flow scripts, and a seal."""

    flow_ops: RedisFlow

    def seal_error(self, key: CanonicalKey, code: ErrorCode) -> object: ...
