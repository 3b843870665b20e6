"""The seal notification's message: the call's bounded outcome, so a waiter needs no read.

``seal.lua`` publishes on the run's channel (``keys.sealed_channel``), once the record is
sealed, one line per field and the agent result last::

    tool_call_id, record's remaining TTL (ms), created_at (ms), attempt, status,
    evidence status, error code, scope, agent result, format=N

The format line (``boundary.formats``) comes after the agent result: a reader of 0.5.0
(format 1, no such line) then fails to parse a READY message's result and reads the record
instead, and still takes an ERROR message's code as it is: never a wrong outcome.

Only what the agent gets anyway: the status, the evidence, the bounded agent result (bounded
by the projector's ``max_agent_result_bytes`` before it is sealed), the scope, the error code.
Never the raw response, a diagnostic or a key.

A waiter trusts a message only for its own call (the tool_call_id, and the record it read,
when it read one: same ``created_at``, an attempt no older) and only when the record it
names cannot have been replaced since the waiter subscribed (``SealMessage.current``):
else it reads the record, as before. A message it cannot parse is a wake-up only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from boundary import formats

#: Fields before the agent result (which is last: it may hold anything JSON does).
_FIELDS = 8
#: Slack on the TTL check for clock rates (the server's and this host's), seconds.
CLOCK_SLACK_S = 1.0


def call_of(data: str) -> str:
    """The tool_call_id a message names (a message of the older form is that id alone)."""
    return data.split("\n", 1)[0]


@dataclass(frozen=True)
class SealMessage:
    """One parsed seal message."""

    tool_call_id: str
    #: The record's remaining TTL when it was sealed, ms.
    ttl_ms: int
    created_at_ms: int
    attempt: int
    status: str
    evidence_status: str
    error_code: str
    scope: str
    agent_result: str
    #: Its format (``boundary.formats``): a last line ``format=N``; 1 without one.
    format: int = 1

    @classmethod
    def parse(cls, data: str) -> SealMessage | None:
        """The message, or ``None`` for one of another form (a wake-up only)."""
        data, found = formats.split_seal(data)
        parts = data.split("\n", _FIELDS)
        if len(parts) != _FIELDS + 1:
            return None
        call, ttl, created, attempt, status, evidence, code, scope, result = parts
        try:
            return cls(
                call,
                int(ttl),
                int(created),
                int(attempt),
                status,
                evidence,
                code,
                scope,
                result,
                found,
            )
        except ValueError:
            return None

    def current(self, watching_since: float, now: float | None = None) -> bool:
        """True when the record this message names is still the one under its key.

        The seal came after the waiter's subscription, which started at ``watching_since``
        (monotonic), and the record lived ``ttl_ms`` past its seal: while less time than
        that has passed since ``watching_since``, no record under the same ids can have
        expired and been created again, so the waiter's own call is this one."""
        if self.ttl_ms == -1:
            return True  # a record without expiry is never replaced
        elapsed = (time.monotonic() if now is None else now) - watching_since
        return elapsed + CLOCK_SLACK_S < self.ttl_ms / 1000
