"""A model turn's tool calls in one round trip each way: ``ToolBoundary.submit_many`` /
``invoke_many`` (and, through them, the async and ``RunBoundary`` forms).

Each call is preflighted on its own and keeps its own outcome (a refused call refuses no
other). The accepted ones are created in ONE store script, in the order given, each with the
rules of one ``create`` (duplicates, also within the turn; budgets charged in order, so a
budget that runs out part way refuses the rest with the same code as one by one); every call
created is dispatched in ONE broker round trip (``dispatch_many``); ``invoke_many`` waits on
all of them with one subscription (the run's seal channel). A limited tool's call asks for
its slot first, as one by one (its own flow round trips): one with a slot is sent with the
others, one that must wait joins its line, one whose line is full is refused TOOL_BUSY.
Outcomes come back in the order given.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from boundary import telemetry
from boundary.call_steps import (
    Prepared,
    give_up_at,
    key_of,
    prepare,
    refuse,
    time_left,
    turned_away,
)
from boundary.dispatch import dispatch_many
from boundary.door import CallTerms
from boundary.errors import ErrorCode, StoreError
from boundary.flow import Flow
from boundary.models import CanonicalKey, RunContext, Submission, ToolCallEnvelope, ToolOutcome
from boundary.store.base import CreateResult
from boundary.store.flow import Admitted, ToolLimits
from boundary.store.seal_wait import SyncSealWatch
from boundary.sync_calls import admit, seal_dispatch_failed, withdraw
from boundary.waits import await_outcome, await_seal, seal_watch, wait_slice

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Limited:
    """A limited tool's call: its limits and what its admission said."""

    limits: ToolLimits
    admitted: Admitted
    #: The admission took a slot or a place in line that is given back if not created.
    taken: bool


@telemetry.traced_submit_many
def submit_many(
    terms: CallTerms, envelopes: Sequence[ToolCallEnvelope], run: RunContext
) -> list[Submission]:
    """``ToolBoundary.submit_many``: one ``Submission`` per envelope, in the order given."""
    answers: list[Submission | None] = [None] * len(envelopes)
    ready: list[tuple[int, Prepared, _Limited | None]] = []
    flow = terms.store.flow
    for i, envelope in enumerate(envelopes):
        prepared = prepare(terms, envelope, run)
        if isinstance(prepared, Submission):
            answers[i] = prepared
            continue
        limited: _Limited | None = None
        limits = flow.limits(prepared.create["tool_name"]) if isinstance(flow, Flow) else None
        if limits is not None:
            assert isinstance(flow, Flow)
            admitted = _admit(terms, flow, limits, prepared, run=run)
            if isinstance(admitted, Submission):
                answers[i] = admitted
                continue
            limited = admitted
        ready.append((i, prepared, limited))
    if ready:
        _create_and_send(terms, ready, answers)
    assert all(answer is not None for answer in answers)
    return [answer for answer in answers if answer is not None]


def _admit(
    terms: CallTerms,
    flow: Flow,
    limits: ToolLimits,
    prepared: Prepared,
    *,
    run: RunContext,
) -> _Limited | Submission:
    """A limited call's slot or place in line, asked for before its record exists (as
    ``sync_calls.submit``): TOOL_BUSY when its line is full and it is new."""
    admitted = admit(terms, flow, limits, prepared, run=run)
    if isinstance(admitted, Submission):
        return admitted
    return _Limited(limits, admitted, admitted in (Admitted.GRANTED, Admitted.WAITING))


def _create_and_send(
    terms: CallTerms,
    ready: list[tuple[int, Prepared, _Limited | None]],
    answers: list[Submission | None],
) -> None:
    flow = terms.store.flow
    try:
        created: list[CreateResult] = terms.store.create_many(
            [(prepared.key, prepared.create) for _, prepared, _ in ready]
        )
    except StoreError:
        for i, prepared, limited in ready:
            _give_back(flow, prepared, limited)
            answers[i] = turned_away(prepared.key, ErrorCode.STORE_UNAVAILABLE)
        return
    to_send: list[tuple[int, Prepared]] = []
    to_line: list[tuple[int, Prepared, _Limited]] = []
    for (i, prepared, limited), result in zip(ready, created, strict=True):
        refused = refuse(prepared.key, result)
        if refused is not None:
            _give_back(flow, prepared, limited)
            answers[i] = refused
        elif limited is None or limited.admitted in (Admitted.GRANTED, Admitted.HOLDS):
            to_send.append((i, prepared))
        else:
            to_line.append((i, prepared, limited))
    sent = dispatch_many(terms.dispatcher, [(p.key, p.queue) for _, p in to_send])
    for (i, prepared), ok in zip(to_send, sent, strict=True):
        if ok:
            answers[i] = Submission(key=prepared.key, accepted=True)
        else:
            # As one by one: the call will never run, so it must not stay PROJECTING.
            logger.warning("dispatch of %s failed; sealing DISPATCH_FAILED", prepared.key.identity)
            answers[i] = seal_dispatch_failed(terms, prepared.key)
    for i, prepared, limited in to_line:
        assert isinstance(flow, Flow)
        try:
            flow.confirm(prepared.key, prepared.create["tool_name"], limited.limits)
        except StoreError:
            # Accepted all the same: the reaper puts a call admitted and never put in line in it.
            logger.warning("flow control: %s not put in line (store)", prepared.key.identity)
        answers[i] = Submission(key=prepared.key, accepted=True)


def _give_back(flow: object, prepared: Prepared, limited: _Limited | None) -> None:
    if limited is not None and isinstance(flow, Flow):
        tool = prepared.create["tool_name"]
        withdraw(flow, prepared.key, tool, limited.limits, limited.taken)


def invoke_many(
    terms: CallTerms,
    envelopes: Sequence[ToolCallEnvelope],
    run: RunContext,
    timeout: float | None,
) -> list[ToolOutcome]:
    """``ToolBoundary.invoke_many``: ``submit_many`` then wait for every accepted call,
    ``timeout`` bounding the whole; outcomes in the order given (a PROJECTING one, pending,
    for a call still running when the time ran out)."""
    give_up = give_up_at(timeout)
    with ExitStack() as stack:
        # Watches of the calls' seals before their records exist: they share the run's one
        # channel, so one SUBSCRIBE (none when it is subscribed already) covers the turn.
        watches: dict[str, SyncSealWatch] = {}
        confirmed = True
        for envelope in envelopes:
            key = _key_if_valid(envelope, run)
            if key is None or key.tool_call_id in watches:
                continue
            watch = seal_watch(terms, key)
            if watch is None:
                break
            watches[key.tool_call_id] = stack.enter_context(watch)
            if not watch.join_subscribed():
                confirmed = watch.attach(wait_slice(terms, time_left(give_up))) and confirmed
        submissions = submit_many(terms, envelopes, run)
        outcomes: list[ToolOutcome] = []
        for submission in submissions:
            if submission.outcome is not None:
                outcomes.append(submission.outcome)
                continue
            key = submission.key
            assert key is not None
            watch = watches.get(key.tool_call_id)
            if watch is None:
                outcomes.append(await_outcome(terms, key, give_up, read_first=False))
            else:
                # Subscribed before the record existed: its seal is a message or in the read.
                outcomes.append(await_seal(terms, key, give_up, watch, read_first=not confirmed))
        return outcomes


def _key_if_valid(envelope: ToolCallEnvelope, run: RunContext) -> CanonicalKey | None:
    """The key a call of the run would get, or ``None`` when preflight will refuse its ids."""
    if envelope.run_id != run.run_id or not envelope.run_id or not envelope.tool_call_id:
        return None
    return key_of(envelope.run_id, envelope.tool_call_id)
