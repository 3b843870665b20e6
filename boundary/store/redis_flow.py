"""Fleet flow control in Redis: one tool's slots, rate window and waiting line, each step one
Lua script (``lua/flow/``, the shared ``_prelude.lua`` prepended) on the tool's keys, which
share its hash tag (``keys.flow_keys``), so a step is atomic on a single Redis, Sentinel and
Redis Cluster alike."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from boundary.models import CanonicalKey
from boundary.store import keys
from boundary.store._redis_common import RedisClient, load_script, script, translated
from boundary.store.codec import ms
from boundary.store.flow import (
    SHARED_TENANT,
    DueLease,
    FlowReply,
    FlowStanding,
    FlowState,
    FlowStatus,
    FlowSweep,
    Grant,
    ToolLimits,
)

#: Seconds after a grant (and between checks after it) that the reaper checks a slot's
#: holder is still the call's running attempt.
DEFAULT_LEASE_CHECK_S = 30.0
#: Age, seconds, past which a call admitted ahead of its record and not yet in line is looked
#: at by the reaper (its submitter died between the two steps).
STALE_ADMISSION_S = 30.0
#: How long a mark of an unsent grant is kept for the reaper, seconds (as every flow key:
#: none lives for ever).
UNSENT_LIFE_S = 7 * 24 * 3600
#: The scripts that make up flow control (``lua/flow/<name>.lua``).
_SCRIPTS = (
    "admit",
    "confirm",
    "release",
    "requeue",
    "start",
    "pump",
    "state",
    "status",
    "sweep",
    "renew",
    "withdraw",
)
#: Override fields and the ToolLimits field each sets.
#: The largest value an override field may hold (the scripts' numbers are doubles: a value
#: past 2**53 would not be read back as written).
OVERRIDE_MAX = 2**31 - 1

OVERRIDE_FIELDS = (
    "concurrency",
    "tenant_concurrency",
    "rate_limit",
    "rate_period_ms",
    "max_waiting",
)


def _source(name: str) -> str:
    return load_script("flow/_prelude") + "\n" + load_script(f"flow/{name}")


_SOURCES = {name: _source(name) for name in _SCRIPTS}


def _opt(value: float | None) -> str | int:
    return "" if value is None else int(value)


def _limit_args(limits: ToolLimits, check_ms: int) -> list[str | int]:
    period = None if limits.rate_period_s is None else max(limits.rate_period_s * 1000, 1)
    if limits.lease_s is not None:
        # A lease renewed by its holder (a reserved entry): its expiry is the check time.
        check_ms = max(int(limits.lease_s * 1000), 1)
    return [
        _opt(limits.concurrency),
        _opt(limits.tenant_concurrency),
        _opt(limits.rate_limit),
        _opt(period),
        _opt(limits.max_waiting),
        check_ms,
    ]


def _keys_of(identities: Sequence[str]) -> Iterator[CanonicalKey]:
    for identity in identities:
        try:
            yield CanonicalKey.from_identity(identity)
        except ValidationError:
            continue  # not an identity this code wrote


def _reply(raw: Sequence[Any]) -> FlowReply:
    code, now, wake, grants, expired = raw
    granted = tuple(
        Grant(key=key, attempt=int(grants[n + 1]), waited_s=max(int(grants[n + 2]), 0) / 1000)
        for n in range(0, len(grants), 3)
        for key in _keys_of([grants[n]])
    )
    return FlowReply(
        code=int(code),
        grants=granted,
        expired=tuple(_keys_of(expired)),
        wake_at_ms=int(wake),
        now_ms=int(now),
    )


def _pairs(flat: Sequence[Any]) -> dict[str, int]:
    return {str(flat[n]): int(flat[n + 1]) for n in range(0, len(flat), 2)}


def _unset(value: int) -> int | None:
    return None if value < 0 else value


class RedisFlow:
    """The flow-control half of ``RedisCanonicalStore`` (its ``flow_ops``), over its client.

    Every method takes the tool's declared ``ToolLimits``; the scripts lay the run-time
    override (``set_override``) over them on the server, so every process applies the same
    limits from its next step on.
    """

    def __init__(self, client: RedisClient, *, lease_check_s: float = DEFAULT_LEASE_CHECK_S):
        self.client = client
        self.lease_check_ms = max(int(lease_check_s * 1000), 1)
        self._scripts = {name: script(client, src) for name, src in _SOURCES.items()}

    def _run(self, name: str, tool: str, limits: ToolLimits, *args: str | int) -> Any:
        argv = [*_limit_args(limits, self.lease_check_ms), *args]
        with translated():
            return self._scripts[name](keys=keys.flow_keys(tool), args=argv)

    def admit(
        self,
        tool: str,
        limits: ToolLimits,
        key: CanonicalKey,
        *,
        attempt: int,
        tenant: str | None,
        priority: int,
        deadline: datetime | None,
        record_exists: bool,
    ) -> FlowReply:
        """Asks for a slot for ``key``'s attempt: granted, waiting, or refused (BUSY). Before
        its record exists (``record_exists`` false) a call that must wait is held out of line
        until ``confirm``."""
        return _reply(
            self._run(
                "admit",
                tool,
                limits,
                key.identity,
                attempt,
                tenant or SHARED_TENANT,
                priority,
                "" if deadline is None else ms(deadline),
                "line" if record_exists else "new",
            )
        )

    def confirm(self, tool: str, limits: ToolLimits, key: CanonicalKey) -> FlowReply:
        """The call's record exists now: it joins the line (and may be granted at once)."""
        return _reply(self._run("confirm", tool, limits, key.identity))

    def release(
        self,
        tool: str,
        limits: ToolLimits,
        key: CanonicalKey,
        *,
        attempt: int | None = None,
        expired: bool = False,
    ) -> FlowReply:
        """The call ended: its slot or its place in line goes, free slots go to the line.
        ``attempt``: only the slot that attempt holds (code -2 when another attempt holds it:
        left alone). ``expired``: only a slot whose lease ran out unrenewed (code -3 when it
        has not: left alone, and the reply's ``wake_at_ms`` is the lease's expiry, not a
        wake-up), for a reserved entry's holders."""
        fence = "" if attempt is None else attempt
        return _reply(
            self._run("release", tool, limits, key.identity, fence, "expired" if expired else "")
        )

    def requeue(
        self,
        tool: str,
        limits: ToolLimits,
        key: CanonicalKey,
        *,
        attempt: int,
        keep: bool,
        tenant: str | None = None,
        priority: int = 0,
        deadline: datetime | None = None,
    ) -> FlowReply:
        """The call moves on to ``attempt``: with ``keep``, it keeps the slot it holds (its
        last attempt never started); else it takes one like any other call."""
        return _reply(
            self._run(
                "requeue",
                tool,
                limits,
                key.identity,
                attempt,
                tenant or SHARED_TENANT,
                priority,
                "" if deadline is None else ms(deadline),
                "keep" if keep else "again",
            )
        )

    def start(
        self, tool: str, limits: ToolLimits, key: CanonicalKey, attempt: int
    ) -> tuple[int, int]:
        """The tool of a rate-limited call starts: (start time, a wake-up to schedule), ms."""
        start, wake = self._run("start", tool, limits, key.identity, attempt)
        return int(start), int(wake)

    def withdraw(
        self, tool: str, limits: ToolLimits, tenant: str, *, most: int = 10_000
    ) -> list[tuple[CanonicalKey, int]]:
        """Every call of ``tenant`` waiting in ``tool``'s line leaves it, in one atomic step
        (up to ``most``): ``(key, attempt)`` of each. Slots held are left alone."""
        flat = self._run("withdraw", tool, limits, tenant, most)
        found = []
        for n in range(0, len(flat), 2):
            for key in _keys_of([flat[n]]):
                found.append((key, int(flat[n + 1])))
        return found

    def pump(self, tool: str, limits: ToolLimits) -> FlowReply:
        """Hands free slots to the line."""
        return _reply(self._run("pump", tool, limits))

    def state(self, tool: str, limits: ToolLimits, key: CanonicalKey) -> FlowState:
        standing, attempt, n = self._run("state", tool, limits, key.identity)
        kind = FlowStanding(int(standing))
        return FlowState(
            standing=kind,
            attempt=int(attempt),
            started=kind is FlowStanding.HOLDS and int(n) == 1,
            ahead=int(n) if kind is FlowStanding.WAITS else None,
        )

    def status(self, tool: str, limits: ToolLimits) -> FlowStatus:
        held, counts, running_by, waiting_by, override = self._run("status", tool, limits)
        concurrency, tenant_concurrency, rate, period, max_waiting = (int(v) for v in held)
        running, waiting, starts, pending, stale = (int(v) for v in counts)
        return FlowStatus(
            tool=tool,
            limits=ToolLimits(
                concurrency=_unset(concurrency),
                tenant_concurrency=_unset(tenant_concurrency),
                rate_limit=_unset(rate),
                rate_period_s=None if period < 0 else period / 1000,
                max_waiting=_unset(max_waiting),
            ),
            override=_override_view(dict(zip(override[::2], override[1::2], strict=True))),
            running=running,
            waiting=waiting,
            starts_in_period=starts,
            pending_starts=pending,
            stale_holders=stale,
            running_by_tenant=_pairs(running_by),
            waiting_by_tenant=_pairs(waiting_by),
        )

    def note_stale(self, tool: str) -> None:
        """One more stale holder of the tool (an attempt refused a step because another had
        its call), kept in its meta hash as long as its other keys."""
        meta = keys.flow_keys(tool)[10]
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(meta, "stale_holders", 1)
            pipe.pexpire(meta, UNSENT_LIFE_S * 1000)
            pipe.execute()

    def sweep(self, tool: str, limits: ToolLimits, *, most: int = 1000) -> FlowSweep:
        due, stale, late, unsent, now, wake, grants, expired = self._run(
            "sweep", tool, limits, most, int(STALE_ADMISSION_S * 1000)
        )
        leases = tuple(
            DueLease(key=key, attempt=int(due[n + 1]), started=int(due[n + 2]) == 1)
            for n in range(0, len(due), 3)
            for key in _keys_of([due[n]])
        )
        return FlowSweep(
            due=leases,
            stale=tuple(_keys_of(stale)),
            late=tuple(_keys_of(late)),
            unsent=tuple(_keys_of(unsent or [])),
            reply=_reply([1, now, wake, grants, expired]),
        )

    def renew(self, tool: str, limits: ToolLimits, key: CanonicalKey, attempt: int) -> bool:
        """Attempt ``attempt`` still holds the slot: its next check (for a reserved entry, its
        lease's expiry) moves on. ``False``: another attempt, or none, holds it (fenced)."""
        return int(self._run("renew", tool, limits, key.identity, attempt)) == 1

    def mark_unsent(self, tool: str, key: CanonicalKey) -> None:
        """A granted call's execute message failed to send: the reaper sends it again."""
        unsent = keys.flow_keys(tool)[keys.FLOW_PARTS.index("unsent")]
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.sadd(unsent, key.identity)
            pipe.pexpire(unsent, UNSENT_LIFE_S * 1000)
            pipe.execute()

    def set_override(self, tool: str, override: dict[str, int | float | None]) -> None:
        """Replaces the tool's run-time override (``None`` lifts a declared limit; a field
        left out keeps the declared one). An empty override is a reset."""
        conf = keys.flow_keys(tool)[keys.FLOW_PARTS.index("conf")]
        for field, value in override.items():
            if value is not None and not 0 <= value <= OVERRIDE_MAX:
                raise ValueError(f"{field} must be within 0..{OVERRIDE_MAX}")
        fields: dict[Any, Any] = {
            f: ("none" if v is None else str(int(v))) for f, v in override.items()
        }
        with translated():
            # Two slots on a cluster: the tool's own key first (what its scripts read), then
            # the index every process reads to learn which tools have an override.
            pipe = self.client.pipeline(transaction=False)
            pipe.delete(conf)
            if fields:
                pipe.hset(conf, mapping=fields)
            pipe.execute()
            if fields:
                self.client.hset(keys.FLOW_OVERRIDES, tool, json.dumps(override, sort_keys=True))
            else:
                self.client.hdel(keys.FLOW_OVERRIDES, tool)

    def overrides(self) -> dict[str, dict[str, int | float | None]]:
        """Every tool's run-time override (from the one index, no scan)."""
        with translated():
            found: dict[str, str] = self.client.hgetall(keys.FLOW_OVERRIDES)  # type: ignore[assignment]
        parsed: dict[str, dict[str, int | float | None]] = {}
        for tool, text in found.items():
            try:
                value = json.loads(text)
            except ValueError:
                continue  # not written by this code
            if isinstance(value, dict):
                parsed[tool] = {k: v for k, v in value.items() if k in OVERRIDE_FIELDS}
        return parsed

    def announce(self, tool: str, limits: ToolLimits, *, now_ms: int, ttl_ms: int) -> None:
        """Notes ``tool`` in the index of limited tools (``keys.FLOW_TOOLS``) with its declared
        limits, seen at ``now_ms``; the index lives ``ttl_ms`` past its last write."""
        entry = json.dumps(
            {**{f: getattr(limits, f) for f in _DECLARED}, "seen_ms": now_ms}, sort_keys=True
        )
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(keys.FLOW_TOOLS, tool, entry)
            pipe.pexpire(keys.FLOW_TOOLS, max(ttl_ms, 1))
            pipe.execute()

    def announced(self, *, now_ms: int, ttl_ms: int) -> dict[str, ToolLimits]:
        """The limited tools of the index seen within ``ttl_ms`` and their declared limits (one
        read, no scan); older entries are dropped."""
        with translated():
            found: dict[str, str] = self.client.hgetall(keys.FLOW_TOOLS)  # type: ignore[assignment]
        tools: dict[str, ToolLimits] = {}
        stale = []
        for tool, text in found.items():
            try:
                entry = json.loads(text)
                seen = int(entry["seen_ms"])
                limits = ToolLimits(**{f: entry.get(f) for f in _DECLARED})
            except (ValueError, TypeError, KeyError):
                continue  # not written by this code
            if now_ms - seen > ttl_ms:
                stale.append(tool)
            else:
                tools[tool] = limits
        if stale:
            with translated():
                self.client.hdel(keys.FLOW_TOOLS, *stale)
        return tools


#: The fields of ``ToolLimits`` the index of limited tools keeps.
_DECLARED = ("concurrency", "tenant_concurrency", "rate_limit", "rate_period_s", "max_waiting")


def _override_view(fields: dict[str, str]) -> dict[str, int | float | None]:
    return {
        name: None if value == "none" else int(value)
        for name, value in fields.items()
        if name in OVERRIDE_FIELDS
    }
