"""Fleet flow control: how many calls of a tool run at once across every worker
(``ToolSpec.concurrency``, ``tenant_concurrency``), how many start per period
(``rate_limit``), how many may wait (``max_waiting``), and fair turns between tenants.

A call that may not start yet is accepted (its record is PROJECTING) and waits in Redis, in
its tool's line, not as a Celery message: no worker thread, prefetch slot or visibility
timeout is spent on it, and nothing polls for it. Whichever step frees a slot (a seal of any
kind: READY, ERROR, CANCELLED, the reaper's WORKER_LOST) hands it to the next call in line in
the same store step and sends that call's execute message; calls the rate limit holds back
are started by one scheduled wake-up at their earliest allowed time. The store keeps the
state (``boundary.store.redis_flow``); this module is the policy of one process: which tools
are limited, and what is done with a script's answer (send the grants, seal the calls whose
deadline passed in line, schedule the wake-up).

A tool without limits pays nothing: ``limits()`` answers from memory, and no step of its
calls touches flow control. The list of run-time overrides (``tool-boundary limits set``) is
read again, off the caller's path, once it is a second old: a process applies an override
from its next call a second after it was set, at the latest.

The same machinery also limits work that is not a tool call: the fleet's own entries
(``Reserved``, named ``tool_boundary.*``; re-projection chunks are ``tool_boundary.reproject``)
take slots, wait in line, are overridden and listed like a tool, but their holders have no
call record: each renews its lease while it works, and the sweep frees a lease left to run
out (``boundary.reaper.sweep_reserved``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from boundary import telemetry
from boundary.errors import ErrorCode, StoreError
from boundary.flow_terms import (
    ANNOUNCE_EVERY_S,
    ANNOUNCE_TTL_S,
    OVERRIDES_TTL_S,
    RELEASE_ATTEMPTS,
    RELEASE_RENEWED,
    RELEASE_RETRY_S,
    RELEASE_STALE,
    RESERVED_PREFIX,
    WAITING_MESSAGE,
    WAKE_MARGIN_S,
    FlowStore,
    Reserved,
    Sender,
    WakeScheduler,
    is_reserved,
    waiting_message,
    waiting_progress,
)
from boundary.models import CallProgress, CanonicalKey, CanonicalRecord, RunContext
from boundary.registry import DEFAULT_QUEUE, ToolRegistry, ToolSpec
from boundary.store.flow import FlowReply, FlowStatus, ToolLimits

__all__ = [
    "ANNOUNCE_EVERY_S",
    "ANNOUNCE_TTL_S",
    "OVERRIDES_TTL_S",
    "RELEASE_ATTEMPTS",
    "RELEASE_RENEWED",
    "RELEASE_RETRY_S",
    "RELEASE_STALE",
    "RESERVED_PREFIX",
    "WAITING_MESSAGE",
    "WAKE_MARGIN_S",
    "Flow",
    "FlowStore",
    "Reserved",
    "Sender",
    "WakeScheduler",
    "is_reserved",
    "waiting_message",
    "waiting_progress",
]

logger = logging.getLogger(__name__)


class Flow:
    """The flow control of one process over one store: made by ``install``.

    Args:
        store: the canonical store (its ``flow_ops`` keep the state).
        registry: the tools and their declared limits.
        sender: sends the execute step of a call handed a slot.
    """

    def __init__(
        self,
        store: FlowStore,
        registry: ToolRegistry,
        sender: Sender | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.ops = store.flow_ops
        #: The tools whose limits apply: this registry, and those of other boundaries made
        #: on the same store later (``install``).
        self.registries = [registry]
        self.sender = sender
        self._clock = clock
        self._lock = threading.Lock()
        self._overrides: frozenset[str] = frozenset()
        self._overrides_at: float | None = None
        self._refreshing = False
        #: Seconds the list of overrides is kept before it is read again.
        self.overrides_ttl_s = OVERRIDES_TTL_S
        #: When this process last noted each tool in the index of limited tools (its clock).
        self._announced: dict[str, float] = {}
        #: The fleet's own entries this process knows (``reserve``).
        self.reserved: dict[str, Reserved] = {}

    @classmethod
    def install(cls, store: object, registry: ToolRegistry, sender: Sender | None) -> Flow | None:
        """The store's flow control: the one installed already (``registry``'s limits added
        to it), else a new one installed now (every seal the store makes tells it). ``None``
        for a store without flow control (not a Redis store)."""
        if not hasattr(store, "flow_ops") or not hasattr(store, "flow"):
            return None
        existing = store.flow
        if isinstance(existing, Flow):
            if all(known is not registry for known in existing.registries):
                existing.registries.append(registry)
            return existing
        flow = cls(store, registry, sender)  # type: ignore[arg-type]
        store.flow = flow
        return flow

    def reserve(self, entry: Reserved) -> None:
        """Makes one of the fleet's own entries known to this process: its limits apply, the
        sweep checks its leases by expiry, its grants go out through ``entry.send``."""
        if not is_reserved(entry.name) or entry.limits.lease_s is None:
            raise ValueError("a reserved entry is named tool_boundary.* and has a lease")
        self.reserved[entry.name] = entry

    # --- Which tools are limited --------------------------------------------------------

    def limits(self, tool: str) -> ToolLimits | None:
        """The tool's declared limits when its calls go through flow control (it declares
        one, or has a run-time override); ``None`` for a tool without limits. A reserved
        entry's (``Reserved``) when this process knows it, else ``None``: a process that
        does not know the entry never takes, hands out or sweeps its slots."""
        entry = self.reserved.get(tool)
        if entry is not None:
            return entry.limits
        if self._unknown_entry(tool):
            return None
        spec = self.spec(tool)
        if spec is not None and spec.limited:
            return ToolLimits.of(spec)
        if tool in self.overridden():
            return ToolLimits.of(spec) if spec is not None else ToolLimits()
        return None

    def _unknown_entry(self, name: str) -> bool:
        """A reserved name this process neither knows (``reserve``) nor has as a tool."""
        return is_reserved(name) and name not in self.reserved and self.spec(name) is None

    def spec(self, tool: str) -> ToolSpec | None:
        """The tool's spec, from the first registry that has it."""
        for registry in self.registries:
            spec = registry.get(tool)
            if spec is not None:
                return spec
        return None

    def overridden(self) -> frozenset[str]:
        """Tools with a run-time override, as last read. Never waits on the store (an event
        loop may be asking): a list older than ``overrides_ttl_s`` is read again on a short
        thread of its own, and this answer is the one before it."""
        read_at = self._overrides_at
        if read_at is None or self._clock() - read_at >= self.overrides_ttl_s:
            with self._lock:
                stale = not self._refreshing
                self._refreshing = True
            if stale:
                threading.Thread(
                    target=self.refresh_overrides, name="tb-flow-overrides", daemon=True
                ).start()
        return self._overrides

    def refresh_overrides(self) -> frozenset[str]:
        """Reads the tools with a run-time override now (the list read last is kept while
        the store cannot be read)."""
        try:
            self._overrides = frozenset(self.ops.overrides())
        except StoreError:
            logger.warning("flow control: the list of overrides could not be read")
        finally:
            self._overrides_at = self._clock()
            self._refreshing = False
        return self._overrides

    def limited_tools(self) -> list[str]:
        """Every tool whose calls go through flow control, in the registry or overridden
        (the overrides read now: for the reaper, the CLI, a metrics scrape)."""
        tools = list(dict.fromkeys(s.name for r in self.registries for s in r if s.limited))
        tools += [name for name in self.reserved if name not in tools]
        overridden = {t for t in self.refresh_overrides() if not self._unknown_entry(t)}
        return tools + sorted(overridden - set(tools))

    def fleet_tools(self) -> dict[str, ToolLimits]:
        """Every limited tool of the fleet and its declared limits: this process's registries
        and reserved entries, the tools any process noted in use (the store's index of
        limited tools) and those with a run-time override, read now (one read of each index,
        never a scan). For the views (``tool-boundary limits``, the web view); raises
        ``StoreError``."""
        announced = self.ops.announced(now_ms=_now_ms(), ttl_ms=self._index_ttl_ms())
        overridden = self.ops.overrides()
        tools = {s.name: ToolLimits.of(s) for r in self.registries for s in r if s.limited}
        for name, entry in self.reserved.items():
            tools.setdefault(name, entry.limits)
        for tool in sorted(announced):
            tools.setdefault(tool, announced[tool])
        for tool in sorted(overridden):
            spec = self.spec(tool)
            tools.setdefault(tool, ToolLimits.of(spec) if spec is not None else ToolLimits())
        return tools

    def fleet_status(self) -> list[FlowStatus]:
        """``status`` of every tool of ``fleet_tools``; raises ``StoreError``."""
        return [self.ops.status(tool, limits) for tool, limits in self.fleet_tools().items()]

    def _index_ttl_ms(self) -> int:
        ttl_s = getattr(self.store, "ttl_s", None)
        return int((ttl_s if isinstance(ttl_s, int | float) else ANNOUNCE_TTL_S) * 1000)

    def announce(self, tool: str, limits: ToolLimits) -> None:
        """Notes ``tool`` in the store's index of limited tools: at once the first time, then
        once every ``ANNOUNCE_EVERY_S`` at most. A store that fails is logged, never raised
        (the call goes on; the next call notes it)."""
        now = self._clock()
        last = self._announced.get(tool)
        if last is not None and now - last < ANNOUNCE_EVERY_S:
            return
        self._announced[tool] = now
        try:
            self.ops.announce(tool, limits, now_ms=_now_ms(), ttl_ms=self._index_ttl_ms())
        except StoreError:
            self._announced.pop(tool, None)
            logger.warning("flow control: the index of limited tools could not be written")

    # --- The steps of a limited call ------------------------------------------------------

    def admit(
        self,
        key: CanonicalKey,
        tool: str,
        limits: ToolLimits,
        run: RunContext,
        *,
        attempt: int = 1,
        record_exists: bool = False,
    ) -> FlowReply:
        """Asks for a slot (see ``RedisFlow.admit``); the slots it handed to other calls on
        the way are sent. Raises ``StoreError``."""
        reply = self.ops.admit(
            tool,
            limits,
            key,
            attempt=attempt,
            tenant=run.tenant,
            priority=run.priority,
            deadline=run.deadline,
            record_exists=record_exists,
        )
        self.deliver(tool, reply)
        self.announce(tool, limits)
        return reply

    def confirm(self, key: CanonicalKey, tool: str, limits: ToolLimits) -> FlowReply:
        """The call's record exists: it joins the line (and is sent if handed a slot)."""
        reply = self.ops.confirm(tool, limits, key)
        self.deliver(tool, reply)
        return reply

    def release(
        self, key: CanonicalKey, tool: str, limits: ToolLimits, *, attempt: int | None = None
    ) -> FlowReply:
        """Gives up the call's slot or place in line; sends the calls handed a slot.
        ``attempt``: only a slot that attempt holds (fenced: one a newer attempt was granted
        is left alone, ``RELEASE_STALE``)."""
        reply = self.ops.release(tool, limits, key, attempt=attempt)
        self.deliver(tool, reply)
        return reply

    def sealed(self, key: CanonicalKey, tool: str, attempt: int | None = None) -> None:
        """The store sealed the call (``FlowHooks``): nothing for a tool without limits; else
        its slot (held by ``attempt``, when given) goes to the next call in line. A store
        failure here is logged, not raised: the reaper finds a slot whose holder is sealed
        and frees it."""
        limits = self.limits(tool)
        if limits is None:
            return
        for n in range(RELEASE_ATTEMPTS):
            try:
                reply = self.release(key, tool, limits, attempt=attempt)
                if reply.code == RELEASE_STALE:
                    logger.warning(
                        "flow control: %s attempt %s gave up no slot (another attempt holds it)",
                        key.identity,
                        attempt,
                    )
                return
            except StoreError:
                if n + 1 < RELEASE_ATTEMPTS:
                    time.sleep(RELEASE_RETRY_S * 2**n)
        logger.warning("flow control: the slot of %s was not given up (store)", key.identity)

    def stale_holder(self, tool: str) -> None:
        """Counts a stale holder of ``tool`` in its flow control (``FlowHooks``); nothing for
        a tool without limits. A store failure is logged, not raised."""
        if self.limits(tool) is None:
            return
        try:
            self.ops.note_stale(tool)
        except StoreError:
            logger.warning("flow control: a stale holder of %s not counted (store)", tool)

    def requeue(
        self,
        key: CanonicalKey,
        tool: str,
        *,
        attempt: int,
        countdown_s: float = 0.0,
        keep: bool = False,
    ) -> bool | None:
        """The call moved on to ``attempt`` (its record says so already). ``None`` for a tool
        without limits (the caller sends the attempt itself); else ``True`` when the attempt
        was handed a slot and sent now, ``False`` when it waits in line (sent when its turn
        comes). ``keep``: the last attempt never started and keeps its slot.

        Raises ``StoreError``, or the sender's error (the grant is then marked unsent: the
        reaper sends it again)."""
        limits = self.limits(tool)
        if limits is None:
            return None
        reply = self.ops.requeue(tool, limits, key, attempt=attempt, keep=keep)
        self.deliver(tool, reply)
        if reply.code != 1:
            return False
        self.send(key, tool, attempt, countdown_s=countdown_s, raising=True)
        return True

    def started(self, key: CanonicalKey, tool: str, attempt: int) -> datetime | None:
        """The tool of a rate-limited call starts now: its start enters the tool's rate
        window, and its time (the store's clock) is returned. ``None``, and no round trip,
        for a tool without a rate limit."""
        limits = self.limits(tool)
        if limits is None or (limits.rate_limit is None and tool not in self.overridden()):
            return None
        for tried in range(RELEASE_ATTEMPTS):
            try:
                start_ms, wake_ms = self.ops.start(tool, limits, key, attempt)
                break
            except StoreError:
                if tried + 1 == RELEASE_ATTEMPTS:
                    # The tool runs all the same (its slot is held): its start is not counted
                    # in the window, whose place it held since the grant stays taken instead.
                    logger.warning("flow control: the start of %s not counted", key.identity)
                    return None
                time.sleep(RELEASE_RETRY_S * 2**tried)
        if wake_ms:
            self._schedule(tool, (wake_ms - start_ms) / 1000)
        return datetime.fromtimestamp(start_ms / 1000, tz=UTC)

    def pump(self, tool: str) -> int:
        """Hands free slots to the tool's line (a wake-up, a raised limit); calls sent."""
        limits = self.limits(tool)
        if limits is None:
            if self._unknown_entry(tool):
                return 0  # not this process's to hand out: its workers pump it
            limits = ToolLimits()  # an override just lifted: its line is emptied
        reply = self.ops.pump(tool, limits)
        self.deliver(tool, reply)
        return len(reply.grants)

    def status(self, tool: str) -> FlowStatus:
        entry = self.reserved.get(tool)
        spec = self.spec(tool)
        if entry is not None:
            limits = entry.limits
        else:
            limits = ToolLimits.of(spec) if spec is not None else ToolLimits()
        return self.ops.status(tool, limits)

    def progress(self, record: CanonicalRecord) -> CallProgress | None:
        """A PROJECTING call's progress: while it waits for a slot, ``waiting`` with the
        calls ahead of it (one round trip, only for a limited tool whose call has not
        started); else what its record says."""
        if record.started_at is None:
            limits = self.limits(record.tool_name)
            if limits is not None:
                try:
                    return waiting_progress(self.ops, record, limits)
                except StoreError:
                    return None
        return CallProgress.of(record)

    # --- What a script's answer asks for --------------------------------------------------

    def deliver(self, tool: str, reply: FlowReply) -> None:
        """Sends the calls handed a slot, seals the calls whose run's deadline passed in line
        (``RUN_DEADLINE_EXCEEDED``, never run) and schedules the wake-up the rate limit asks
        for. Never raises: a grant that cannot be sent is marked for the reaper."""
        for grant in reply.grants:
            telemetry.slot_waited(tool, grant.waited_s)
            self.send(grant.key, tool, grant.attempt)
        for key in reply.expired:
            try:
                self.store.seal_error(key, ErrorCode.RUN_DEADLINE_EXCEEDED)
            except StoreError:
                logger.warning("flow control: %s not sealed past its deadline", key.identity)
        if reply.wake_at_ms:
            self._schedule(tool, (reply.wake_at_ms - reply.now_ms) / 1000)

    def send(
        self,
        key: CanonicalKey,
        tool: str,
        attempt: int,
        *,
        countdown_s: float = 0.0,
        raising: bool = False,
    ) -> None:
        """Sends the execute step of a call that holds a slot. A failed send is marked on
        the tool's keys, so the reaper sends it again (as a new attempt). A reserved
        entry's holder goes out through the entry's own ``send``."""
        entry = self.reserved.get(tool)
        if entry is not None:
            self._send_reserved(entry, key, attempt, raising=raising)
            return
        spec = self.spec(tool)
        queue = spec.queue if spec is not None else DEFAULT_QUEUE
        try:
            if self.sender is None:
                raise RuntimeError("no sender")
            self.sender.send_attempt(key, attempt=attempt, queue=queue, countdown_s=countdown_s)
        except Exception:
            logger.error("flow control: attempt %d of %s not sent", attempt, key.identity)
            try:
                self.ops.mark_unsent(tool, key)
            except StoreError:
                logger.error("flow control: unsent %s not marked (store)", key.identity)
            if raising:
                raise
            return
        logger.debug("flow control: %s sent (attempt %d)", key.identity, attempt)

    def _send_reserved(
        self, entry: Reserved, key: CanonicalKey, attempt: int, *, raising: bool
    ) -> None:
        try:
            entry.send(key, attempt)
        except Exception:
            logger.error("flow control: %s of %s not sent", key.identity, entry.name)
            try:
                self.ops.mark_unsent(entry.name, key)
            except StoreError:
                logger.error("flow control: unsent %s not marked (store)", key.identity)
            if raising:
                raise

    def _schedule(self, tool: str, delay_s: float) -> None:
        delay_s = max(delay_s, 0.0) + WAKE_MARGIN_S
        sender = self.sender
        if isinstance(sender, WakeScheduler):
            try:
                sender.schedule_wake(tool, delay_s)
                return
            except Exception:
                # The reaper's pass pumps every limited tool: the wake-up comes late, not never.
                logger.warning("flow control: the wake-up of %s was not scheduled", tool)
                return
        timer = threading.Timer(delay_s, self._wake, args=(tool,))
        timer.daemon = True
        timer.start()

    def _wake(self, tool: str) -> None:
        try:
            self.pump(tool)
        except StoreError:
            logger.warning("flow control: the wake-up of %s failed (store)", tool)


def _now_ms() -> int:
    return int(time.time() * 1000)
