"""What the chaos run found, once the system has settled: the counts its design fixes
(``accepted, ready, error_by_code, lost, stuck, duplicate_executions, unplanned_worker_exits,
slots_left_held, keys_without_ttl``), what they rest on, and a one-line summary.

The records decide: every accepted call's record is read from the store (the Harness view).
- lost: accepted, no record now, and its caller never read a sealed outcome for it;
- stuck: still PROJECTING after settling;
- duplicate executions (from the ledger, ``bench.studies.chaos.tools``): per attempt of a call,
every
  execution that ran to its end beyond the first (an execution whose process was killed never
  ends, and may lawfully run again), plus every attempt that ran beyond what the tool's retry
  policy allows;
- keys without a TTL: the run keys of the store (``tb:{run}:...``, SCAN: the store is the chaos
  run's own) and Celery's result keys.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import redis

from bench.studies.chaos.fleet import Fleet
from bench.studies.chaos.load import Seen
from bench.studies.chaos.tools import FINISHED, LONG, LONG_RETRY, STARTED, registry
from boundary import (
    CanonicalKey,
    CanonicalRecord,
    InvocationStatus,
    RedisCanonicalStore,
    ToolRegistry,
)
from boundary.flow import Flow

#: Longest wait for the slots to be given up after the calls ended: a lease check (30 s) and
#: two reaper passes.
SLOTS_BOUND_S = 45.0
#: Seconds between two reads of the calls still PROJECTING while settling.
SETTLE_POLL_S = 2.0
#: Attempts a call of each tool may make (its retry policy); 1 for the others.
ALLOWED_ATTEMPTS = {LONG: LONG_RETRY.max_attempts}

Identity = tuple[str, str]


def slots_left_held(
    store: RedisCanonicalStore, registry: ToolRegistry, bound_s: float = SLOTS_BOUND_S
) -> int:
    """Slots of the registry's limited tools still held, and calls still in their lines, once
    every call has ended (read from each tool's flow-control keys). A slot whose holder was
    sealed while the store did not hear of it is freed by the reaper's check of its lease, so
    this waits up to ``bound_s`` for the count to reach 0 before it reports what is left."""
    flow = Flow(store, registry, None)
    give_up = time.monotonic() + bound_s
    while True:
        held = sum(s.running + s.waiting for s in map(flow.status, flow.limited_tools()))
        if held == 0 or time.monotonic() > give_up:
            return held
        time.sleep(1.0)


def read_records(
    store: RedisCanonicalStore, identities: Iterable[Identity]
) -> dict[Identity, CanonicalRecord | None]:
    return {
        (run_id, call_id): store.get(
            CanonicalKey(run_id=run_id, tool_call_id=call_id), with_raw=False
        )
        for run_id, call_id in identities
    }


def settle(
    store: RedisCanonicalStore, seen: Seen, bound_s: float
) -> tuple[dict[Identity, Any], float]:
    """Waits until no accepted call is PROJECTING, or ``bound_s`` passed; the records then,
    and the seconds it took. A store error while reading counts as still pending."""
    started = time.monotonic()
    records: dict[Identity, Any] = {}
    pending = list(seen.accepted)
    while True:
        for identity in pending:
            try:
                records.update(read_records(store, [identity]))
            except Exception:
                records[identity] = "unreadable"
        pending = [i for i, r in records.items() if _pending(r)]
        if not pending or time.monotonic() - started > bound_s:
            return records, time.monotonic() - started
        time.sleep(SETTLE_POLL_S)


def _status(store: RedisCanonicalStore, identity: Identity) -> str:
    record = read_records(store, [identity])[identity]
    if record is None:
        return "missing"
    return str(record.error_code.value if record.error_code else record.status.value)


def _pending(record: Any) -> bool:
    if record == "unreadable":
        return True
    return record is not None and record.status is InvocationStatus.PROJECTING


def executions(ledger: redis.Redis) -> dict[Identity, dict[int, tuple[int, int]]]:
    """Per call, per attempt: (executions started, executions that ran to their end)."""
    started: dict[str, str] = ledger.hgetall(STARTED)  # type: ignore[assignment]
    finished: dict[str, str] = ledger.hgetall(FINISHED)  # type: ignore[assignment]
    counted: dict[Identity, dict[int, tuple[int, int]]] = {}
    for field, runs in started.items():
        run_id, call_id, attempt = field.rsplit(":", 2)
        ends = int(finished.get(field, 0))
        counted.setdefault((run_id, call_id), {})[int(attempt)] = (int(runs), ends)
    return counted


def duplicates(
    counted: dict[Identity, dict[int, tuple[int, int]]], tools: dict[Identity, str]
) -> tuple[int, list[str]]:
    """Executions beyond what the calls' retry policies allow, and the calls they were of."""
    total, calls = 0, []
    for identity, attempts in counted.items():
        extra = sum(max(ends - 1, 0) for _, ends in attempts.values())
        # Attempt numbers also count re-sends of a message that never reached a tool: what
        # the policy bounds is the attempts that ran.
        allowed = ALLOWED_ATTEMPTS.get(tools.get(identity, ""), 1)
        extra += max(len(attempts) - allowed, 0)
        if extra:
            total += extra
            calls.append(f"{identity[0]}:{identity[1]} {sorted(attempts.items())}")
    return total, calls


def keys_without_ttl(store_admin: redis.Redis, backend_admin: redis.Redis) -> tuple[int, list[str]]:
    found = [
        key
        for client, pattern in ((store_admin, "tb:{*"), (backend_admin, "celery-task-meta-*"))
        for key in client.scan_iter(match=pattern, count=1000)
        if client.ttl(key) == -1
    ]
    return len(found), found[:10]


def build(
    fleet: Fleet,
    store: RedisCanonicalStore,
    seen: Seen,
    records: dict[Identity, Any],
    *,
    faults: Counter[str],
    details: dict[str, Any],
) -> dict[str, Any]:
    ready = 0
    errors: Counter[str] = Counter()
    lost, stuck, missing_seen = [], [], 0
    sealed_seen = {i for i, label in seen.last_outcome.items() if label != "PROJECTING"}
    for identity, record in records.items():
        if record is None:
            if identity in sealed_seen:
                missing_seen += 1
            else:
                lost.append(identity)
        elif _pending(record):
            stuck.append(identity)
        elif record.status is InvocationStatus.READY:
            ready += 1
        else:
            errors[record.error_code.value if record.error_code else "?"] += 1
    counted = executions(fleet.ledger.client())
    duplicate_count, duplicate_calls = duplicates(counted, dict(seen.accepted))
    admin = fleet.store_admin()
    no_ttl, no_ttl_keys = keys_without_ttl(admin(0), admin(1))
    exits = [exit for worker in fleet.workers for exit in worker.unplanned_exits]
    return {
        "accepted": len(seen.accepted),
        "ready": ready,
        "error_by_code": dict(sorted(errors.items())),
        "lost": len(lost),
        "stuck": len(stuck),
        "duplicate_executions": duplicate_count,
        "unplanned_worker_exits": len(exits),
        "slots_left_held": slots_left_held(store, registry),
        "keys_without_ttl": no_ttl,
        "faults": dict(sorted(faults.items())),
        "details": details
        | {
            "refused_at_submit": dict(sorted(seen.refused.items())),
            "caller_errors": dict(seen.caller_errors),
            "cancels": seen.cancels,
            "lost_calls": [":".join(i) for i in lost[:10]],
            "stuck_calls": [":".join(i) for i in stuck[:10]],
            "missing_record_after_a_sealed_outcome": missing_seen,
            "duplicate_calls": duplicate_calls[:10],
            "executions": sum(s for a in counted.values() for s, _ in a.values()),
            "executed_but_not_accepted": [
                f"{':'.join(i)} refused {seen.refused_calls.get(i)}, record {_status(store, i)}"
                for i in sorted(set(counted) - set(seen.accepted))[:10]
            ],
            "keys_without_ttl": no_ttl_keys,
            "unplanned_exit_logs": [exit[-2000:] for exit in exits[:3]],
            "beat_unplanned_exits": len(fleet.beat.unplanned_exits),
            "worker_starts": {w.name: w.starts for w in fleet.workers},
        },
    }


def summary(report: dict[str, Any], seed: int, minutes: float) -> str:
    errors = ",".join(f"{code}={n}" for code, n in report["error_by_code"].items()) or "none"
    return (
        f"chaos seed={seed} minutes={minutes:g} faults={sum(report['faults'].values())}: "
        f"accepted={report['accepted']} ready={report['ready']} errors[{errors}] "
        f"lost={report['lost']} stuck={report['stuck']} "
        f"duplicate_executions={report['duplicate_executions']} "
        f"unplanned_worker_exits={report['unplanned_worker_exits']} "
        f"slots_left_held={report['slots_left_held']} keys_without_ttl={report['keys_without_ttl']}"
    )
