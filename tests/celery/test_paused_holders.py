"""A worker paused while it holds slots (SIGSTOP: a GC pause, a VM freeze, a throttled
container), past its lease: the fleet reclaims its calls and starts others; on SIGCONT the
stale holders are fenced. Every call's outcome comes from its newest attempt, each stale
holder is stopped at its first heartbeat or has its raw response refused (counted in the
record), the tool's own live count passes its limit only until the stale holders leave and by
at most their number, and no slot is left held. With a threads and a prefork worker paused.

No timing is asserted: the tool logs what each execution did (``tests.support.flow_tools.paced``) in
the order Redis saw it, and the test reads that order."""

from __future__ import annotations

import os
import signal
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

from boundary import (
    CanonicalKey,
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.flow import Flow
from boundary.reaper import Retries, reap_once
from boundary.store import keys
from tasks import CeleryDispatcher
from tasks.wiring.app import create_app
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support import flow_tools
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("flow-fleet")]

TOOL, LIMIT = "paced", 2
RUN = RunContext(run_id="run-paused", authorized_tools=frozenset({TOOL}))
#: Calls: the first LIMIT are held by the worker that is paused; the others wait in line.
CALLS = 5
#: Longest the test waits for any one stage, seconds (a give-up, never an assertion on time).
GIVE_UP_S = 90.0


def key_of(call_id: str) -> CanonicalKey:
    return CanonicalKey(run_id=RUN.run_id, tool_call_id=call_id)


def wait_for(what: str, done: Any) -> None:
    wait_until(done, what, GIVE_UP_S, every=0.05)


class Event:
    def __init__(self, text: str) -> None:
        self.what, identity, attempt, pid = text.split("|")
        self.call_id = identity.split(":", 1)[1]
        self.attempt, self.pid = int(attempt), int(pid)

    @property
    def execution(self) -> tuple[str, int]:
        return self.call_id, self.attempt


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_paused_worker_s_stale_holders_are_fenced_when_it_resumes(
    pool: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    tag = f"paused-{pool}"
    events_key, go_key = flow_tools.events_key(tag), flow_tools.go_key(tag)
    running_key = flow_tools.keys_of(tag)[0]
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), tools="tests.support.flow_tools:registry"
    )
    flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_paused_client")
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    dispatcher = CeleryDispatcher(app)
    boundary = ToolBoundary(store=store, registry=flow_tools.registry, dispatcher=dispatcher)
    flow = store.flow
    assert isinstance(flow, Flow)
    retries = Retries(
        registry=flow_tools.registry,
        sender=dispatcher,
        max_redispatches=2,
        max_pending_s=600,
        reap_grace_s=1,
    )

    def reap() -> None:
        reap_once(store, lambda key: None, retry_after_s=5, max_reprojections=2, retries=retries)

    def events() -> list[str]:
        return [str(e) for e in redis_client.lrange(events_key, 0, -1)]

    with ExitStack() as stack:
        # Given the worker to pause, alone, holding both slots of the tool
        paused = stack.enter_context(
            celery_process(
                settings, *worker_args(f"paused-{pool}", pool, LIMIT), log=tmp_path / "paused.log"
            )
        )
        for n in range(CALLS):
            call = ToolCallEnvelope(
                run_id=RUN.run_id, tool_call_id=f"c{n}", tool_name=TOOL, arguments={"tag": tag}
            )
            assert boundary.submit(call, RUN).accepted
        wait_for(
            "the paused worker holds both slots",
            lambda: sum(e.startswith("enter|") for e in events()) == LIMIT,
        )
        group = os.getpgid(paused.pid)
        held = [Event(e) for e in events() if e.startswith("enter|")]
        assert all(os.getpgid(e.pid) == group for e in held)
        # And a second worker, which will run what the fleet reclaims
        stack.enter_context(
            celery_process(
                settings,
                *worker_args(f"rescuer-{pool}", "threads", 4),
                log=tmp_path / "rescuer.log",
            )
        )

        # When the worker is paused past its lease
        os.killpg(group, signal.SIGSTOP)
        try:
            # And the reaper reclaims its calls, and other calls start in their slots
            def reclaimed() -> bool:
                reap()
                moved = all(
                    (r := store.get(key_of(e.call_id), with_raw=False)) is not None
                    and r.attempt > e.attempt
                    for e in held
                )
                started = [Event(e) for e in events() if e.startswith("enter|")][len(held) :]
                return moved and any(os.getpgid(e.pid) != group for e in started)

            wait_for("the fleet reclaims the paused calls and starts others", reclaimed)
            # (one of its holders will return at once when it resumes, without a heartbeat:
            # then its raw response is what is refused)
            redis_client.set(flow_tools.go_key(tag, held[0].call_id), "1")
        finally:
            # Then it resumes
            redis_client.rpush(events_key, "resume")
            os.killpg(group, signal.SIGCONT)

        stale = {e.execution for e in held}
        wait_for(
            "every stale holder leaves",
            lambda: {Event(e).execution for e in events() if e.startswith("leave|")} >= stale,
        )
        # And the calls are let finish
        redis_client.set(go_key, "1")
        outcomes: dict[str, object] = {}

        def all_ended() -> bool:
            reap()
            for n in range(CALLS):
                outcome = boundary.outcome(RUN.run_id, f"c{n}", timeout=0.01)
                if not outcome.pending:
                    outcomes[f"c{n}"] = outcome
            return len(outcomes) == CALLS

        wait_for("every call ends", all_ended)
        wait_for(
            "no slot held", lambda: (flow.status(TOOL).running, flow.status(TOOL).waiting) == (0, 0)
        )

    log = events()
    marker = log.index("resume")
    after = [Event(e) for e in log[marker + 1 :]]
    # Then every call's outcome comes from its newest attempt; the paused ones are retried
    for n in range(CALLS):
        record = store.get(key_of(f"c{n}"), with_raw=False)
        assert record is not None and record.status is InvocationStatus.READY
        assert record.agent_result is not None
        outcome = outcomes[f"c{n}"]
        assert outcome.result["attempt"] == record.attempt  # type: ignore[attr-defined]
    for execution in stale:
        record = store.get(key_of(execution[0]), with_raw=False)
        assert record is not None and record.attempt > execution[1]
        # The stale holder's refused steps are counted in the record
        assert (
            int(redis_client.hget(keys.record_key(key_of(execution[0])), "stale_refusals") or 0)
            >= 1
        )
        # And after the resume it went on for at most the heartbeat it was in (paused between
        # its heartbeat and its log of it), then was stopped at its next one, or returned (its
        # response refused), and left
        mine = [e.what for e in after if e.execution == execution]
        assert mine.count("beat") <= 1, mine
        assert mine[-1] == "leave" and mine.count("stopped") <= 1, mine
    # The tool's own live count passed its limit only until the last stale holder left, and by
    # at most the number of stale holders
    live: set[tuple[str, int]] = set()
    for e in (Event(text) for text in log[:marker]):
        if e.what == "enter":
            live.add(e.execution)
        elif e.what == "leave":
            live.discard(e.execution)
    last_stale_leave = max(
        i for i, e in enumerate(after) if e.what == "leave" and e.execution in stale
    )
    highest = len(live)
    for i, e in enumerate(after):
        if e.what == "enter":
            live.add(e.execution)
        elif e.what == "leave":
            live.discard(e.execution)
        highest = max(highest, len(live))
        assert len(live) <= LIMIT + len(stale), (i, sorted(live))
        if len(live) > LIMIT:
            assert i < last_stale_leave, (i, sorted(live))
    assert live == set()
    # Nothing left held: no slot, no execution counted as running
    assert redis_client.hlen(running_key) == 0
    # And each stale holder was counted once in the tool's flow control (limits shows it)
    assert flow.status(TOOL).stale_holders == len(stale)
    ends = {x: [e.what for e in after if e.execution == x][-2:] for x in sorted(stale)}
    print(
        f"paused {pool} worker: {len(stale)} stale holders, limit {LIMIT}, live count after "
        f"the resume at most {highest}, stale ends {ends}, attempts "
        f"{[store.get(key_of(f'c{n}'), with_raw=False).attempt for n in range(CALLS)]}"  # type: ignore[union-attr]
    )
