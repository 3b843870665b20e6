"""Fleet flow control's data, as the store keeps it: a tool's limits, and what its scripts
answer (``redis_flow`` is the Redis implementation; ``boundary.flow`` the policy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from boundary.models import CanonicalKey

if TYPE_CHECKING:
    from boundary.registry import ToolSpec

#: The tenant of runs without one (``RunContext.tenant`` None): not a safe id, so no run's
#: tenant can be it.
SHARED_TENANT = "_"


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """A tool's declared limits (``ToolSpec``); a run-time override kept in the store is laid
    over them by the store itself, so every process uses the same."""

    concurrency: int | None = None
    tenant_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period_s: float | None = None
    max_waiting: int | None = None
    #: How long a slot stays held without a renewal before the sweep may free it, seconds:
    #: for the fleet's own entries (``boundary.flow.Reserved``), whose holders have no call
    #: record to check. ``None`` (every tool): the store's check interval, after which the
    #: sweep reads the holder's record.
    lease_s: float | None = None

    @classmethod
    def of(cls, spec: ToolSpec) -> ToolLimits:
        rate = spec.rate_limit
        return cls(
            concurrency=spec.concurrency,
            tenant_concurrency=spec.tenant_concurrency,
            rate_limit=rate.limit if rate is not None else None,
            rate_period_s=rate.period_s if rate is not None else None,
            max_waiting=spec.max_waiting,
        )


class Admitted(IntEnum):
    """What a call's request for a slot came to (``admit``, ``confirm``, ``requeue``)."""

    #: Refused: ``max_waiting`` calls wait already (nothing was written).
    BUSY = -1
    #: It neither holds a slot nor waits (withdrawn, cancelled or swept meanwhile).
    NONE = 0
    #: It holds a slot now: its caller sends its execute message.
    GRANTED = 1
    #: It waits (in line, or admitted ahead of its record and put in line by ``confirm``).
    WAITING = 2
    #: It held a slot already (a call admitted twice).
    HOLDS = 3
    #: It waited already.
    WAITS = 4


@dataclass(frozen=True, slots=True)
class Grant:
    """A waiting call that was handed a slot: its caller-to-be sends attempt ``attempt``."""

    key: CanonicalKey
    attempt: int
    #: How long it waited in line, seconds (the store's clock).
    waited_s: float


@dataclass(frozen=True, slots=True)
class FlowReply:
    """A flow script's answer: its own code, the slots it handed to waiting calls (each to
    be sent by whoever got the reply), the calls whose run's deadline passed in line (taken
    out, to be sealed RUN_DEADLINE_EXCEEDED), and a wake-up to schedule (epoch ms; 0: none)
    for calls the rate limit holds back."""

    code: int
    grants: tuple[Grant, ...] = ()
    expired: tuple[CanonicalKey, ...] = ()
    wake_at_ms: int = 0
    #: The store's clock when the script ran, ms (a wake-up's delay is measured on it).
    now_ms: int = 0

    @property
    def admitted(self) -> Admitted:
        return Admitted(self.code)


class FlowStanding(IntEnum):
    NONE = 0
    #: It holds a slot (granted; ``started`` tells whether its tool began).
    HOLDS = 1
    #: It waits in line (``ahead`` calls before it).
    WAITS = 2
    #: Admitted ahead of its record; in line once the record is written.
    ADMITTED = 3


@dataclass(frozen=True, slots=True)
class FlowState:
    """Where one call stands at its tool's flow control."""

    standing: FlowStanding
    attempt: int = 0
    started: bool = False
    #: Calls ahead of it in line (``None`` unless it waits in line).
    ahead: int | None = None


@dataclass(frozen=True, slots=True)
class FlowStatus:
    """One tool's flow control at a glance: the limits in force (declared, overlaid by the
    override) and what holds and waits."""

    tool: str
    limits: ToolLimits
    #: The run-time override's fields (``None`` values lift a declared limit).
    override: dict[str, int | float | None]
    running: int
    waiting: int
    #: Real starts in the rate window, and grants that have not started yet.
    starts_in_period: int
    pending_starts: int
    running_by_tenant: dict[str, int] = field(default_factory=dict)
    waiting_by_tenant: dict[str, int] = field(default_factory=dict)
    #: Attempts of the tool refused a step because another attempt had their call (paused
    #: holders whose slots the fleet reclaimed), over the last week.
    stale_holders: int = 0


@dataclass(frozen=True, slots=True)
class DueLease:
    key: CanonicalKey
    attempt: int
    started: bool


@dataclass(frozen=True, slots=True)
class FlowSweep:
    """What the reaper's sweep of one tool found (``redis_flow.RedisFlow.sweep``)."""

    #: Slots due for a check of their holder.
    due: tuple[DueLease, ...]
    #: Calls admitted ahead of their record and never put in line.
    stale: tuple[CanonicalKey, ...]
    #: Calls taken out of line because their run's deadline passed.
    late: tuple[CanonicalKey, ...]
    #: Grants whose execute message failed to send.
    unsent: tuple[CanonicalKey, ...]
    reply: FlowReply
