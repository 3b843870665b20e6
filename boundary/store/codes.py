"""The one table of the record scripts' return codes (``lua/_prelude.lua``'s ``CODE``): the
same number means the same thing in every script. Each Python wrapper maps a script's reply
through it.

The flow-control scripts (``lua/flow/``) keep their own answers: they say where a call stands
in its tool's flow control (holds a slot, waits in line, neither) and carry the grants a step
made, not whether a conditional write on a record happened."""

from __future__ import annotations

from enum import IntEnum


class ScriptCode(IntEnum):
    """What a record script answers when it writes nothing (``OK`` when it wrote; a script
    that answers a time or a count answers that instead, always >= 1)."""

    OK = 1
    #: The key is missing or expired: nothing written, nothing re-created.
    MISSING = 0
    #: The record is sealed (not PROJECTING).
    NOT_PROJECTING = -1
    #: A raw response is kept already.
    ALREADY_STORED = -2
    #: The record under these ids is not the one the caller read (another call since).
    REPLACED = -3
    #: Another attempt has the call now: the caller's attempt is stale and must stop.
    SUPERSEDED = -4
    #: The call's deadline passed.
    PAST_DEADLINE = -5
    #: The arguments break the lifecycle table (a bug in the caller, not bad input).
    INVALID = -6
    #: No raw response is kept (nothing to project again).
    NO_RAW = -7
    #: The call's re-projections are used up.
    EXHAUSTED = -8
    #: The call's tool has started.
    STARTED = -9
    #: The run is not open (closed, or unknown).
    CLOSED = -10
    #: The key holds someone else's value (another policy, another owner): kept.
    CONFLICT = -11
    #: Already so (the same policy, the same owner, closed already): nothing to write.
    UNCHANGED = -12
    #: Refused, the reason follows in the reply (create: DUPLICATE, CONFLICT, a budget).
    REFUSED = -13
    #: Not due any more (the reaper's judgement is out of date): its reap time moved on, or
    #: its tool started after the reaper read its list.
    NOT_DUE = -14
